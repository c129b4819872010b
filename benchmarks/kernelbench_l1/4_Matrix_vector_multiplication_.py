"""KernelBench level-1 style: matrix-vector multiplication (8192 x 16384) @ (16384 x 1).

HEADROOM_BENCH_SCALE=cpu gives a small CPU instance.
"""
import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE") == "cpu"
M = 64 if _CPU else 8192
K = 256 if _CPU else 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
