"""KernelBench level-1 style: BatchNorm2d(64) (training mode: batch statistics) on (32, 64, 256, 256).

HEADROOM_BENCH_SCALE=cpu gives a small CPU instance.
"""
import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE") == "cpu"
BATCH = 4 if _CPU else 32
FEATURES = 8 if _CPU else 64
DIM1 = 16 if _CPU else 256
DIM2 = 16 if _CPU else 256


class Model(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return [FEATURES]
