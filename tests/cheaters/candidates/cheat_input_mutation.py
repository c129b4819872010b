"""Cheat: correct output, but the input is used as scratch space and left modified."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.gelu(self.linear(x))
        x.mul_(0.5)  # "free" scratch buffer
        return y
