"""Cheat: precision downgrade (bfloat16 compute) beyond the fp32 tolerance."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight.to(torch.bfloat16)
        b = self.linear.bias.to(torch.bfloat16)
        y = torch.nn.functional.linear(x.to(torch.bfloat16), w, b)
        return torch.nn.functional.gelu(y).to(x.dtype)
