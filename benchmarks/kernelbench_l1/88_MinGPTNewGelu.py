"""KernelBench level-1 style: minGPT's tanh-approximation GELU, written out, on (8192, 8192).

HEADROOM_BENCH_SCALE=cpu gives a small CPU instance.
"""
import math
import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE") == "cpu"
BATCH = 32 if _CPU else 8192
DIM = 512 if _CPU else 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
