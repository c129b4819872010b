"""Honest control (slower): the problem's own math computed twice, the second result returned — twice the
work, so a speedup of about 0.5x, conclusive, never a pass above 1."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = torch.nn.functional.gelu(self.linear(x))
        second = torch.nn.functional.gelu(self.linear(x))
        return second if first.data_ptr() != second.data_ptr() else first
