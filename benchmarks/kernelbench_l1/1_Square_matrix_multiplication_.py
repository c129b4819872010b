"""KernelBench level-1 style: square matrix multiplication C = A @ B (N = 4096).

HEADROOM_BENCH_SCALE=cpu gives a small CPU instance.
"""
import os

import torch
import torch.nn as nn

N = 64 if os.environ.get("HEADROOM_BENCH_SCALE") == "cpu" else 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
