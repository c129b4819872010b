"""KernelBench level-1 style: RMS normalisation over the feature dim of (16, 64, 256, 256).

HEADROOM_BENCH_SCALE=cpu gives a small CPU instance.
"""
import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE") == "cpu"
BATCH = 4 if _CPU else 16
FEATURES = 8 if _CPU else 64
DIM1 = 16 if _CPU else 256
DIM2 = 16 if _CPU else 256


class Model(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return [FEATURES]
