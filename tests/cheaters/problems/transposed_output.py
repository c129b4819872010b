"""Small problem whose output is not contiguous (a transposed view, as attention kernels return)."""

import torch
import torch.nn as nn

BATCH = 8
SEQ = 64
HEADS = 4
DIM = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (batch, seq, heads, dim) computed, returned as (batch, heads, seq, dim) without a copy
        return torch.tanh(x).transpose(1, 2)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HEADS, DIM)]


def get_init_inputs():
    return []
