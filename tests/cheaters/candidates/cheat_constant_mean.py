"""Cheat (for large_mean.py): returns the per-column mean (bias + offset), no matmul at all."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        row = self.linear.bias + 1.0e5
        return row.expand(x.shape[0], -1).contiguous()
