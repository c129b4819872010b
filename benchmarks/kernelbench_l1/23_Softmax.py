"""KernelBench level-1 style: softmax over dim 1 of (4096, 32768).

Each output is ~3e-5: an all-zeros answer passes allclose(atol=1e-2).
HEADROOM_BENCH_SCALE=cpu gives a small CPU instance.
"""
import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE") == "cpu"
BATCH = 16 if _CPU else 4096
DIM = 2048 if _CPU else 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
