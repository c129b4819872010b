"""Honest: the same math written differently (addmm + erf GELU)."""

import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # same parameter creation order: same weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        return 0.5 * y * (1.0 + torch.erf(y / math.sqrt(2.0)))
