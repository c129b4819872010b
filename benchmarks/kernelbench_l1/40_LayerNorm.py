"""KernelBench level-1 style: LayerNorm over the last three dims of (16, 64, 256, 256).

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
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return [(FEATURES, DIM1, DIM2)]
