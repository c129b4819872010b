"""KernelBench level-1 style: diag(A) @ B, A (4096,), B (4096, 4096).

The reference materialises the diagonal matrix and runs a full GEMM.
HEADROOM_BENCH_SCALE=cpu gives a small CPU instance.
"""
import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE") == "cpu"
N = 64 if _CPU else 4096
M = 48 if _CPU else 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.diag(A) @ B


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
