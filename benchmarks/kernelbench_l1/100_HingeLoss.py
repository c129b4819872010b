"""KernelBench level-1 style: hinge loss mean(clamp(1 - p * y, min=0)) over 4M samples (scalar output).

The labels y are +-1, so on the published inputs the loss concentrates at
E[max(0, 1 - Z)] = 1.0833 for Z ~ N(0, 1): a constant passes allclose(1e-2).
HEADROOM_BENCH_SCALE=cpu gives a small CPU instance.
"""
import os

import torch
import torch.nn as nn

N = 4096 if os.environ.get("HEADROOM_BENCH_SCALE") == "cpu" else 4 * 1024 * 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def get_inputs():
    return [torch.randn(N), torch.randint(0, 2, (N,)).float() * 2 - 1]


def get_init_inputs():
    return []
