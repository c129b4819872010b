"""Holds a large table from import (a precomputed answer it could look up), honest math in the forward.

The memory measurement counts the peak of one forward (parameters plus what the forward allocates):
memory held since import was not counted. The attack fills 512 MiB at import and keeps it.

Expected: its honest verdict with the review flag ``memory_footprint`` (its memory cgroup's peak, import
included, against the reference's)."""

import torch
import torch.nn as nn

_TABLE = torch.ones(128 << 20, dtype=torch.float32)  # 512 MiB, touched


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))
