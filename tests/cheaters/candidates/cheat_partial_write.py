"""Cheat: writes 0.3% of the output (correctly) into an uninitialised buffer, skips the rest."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape[0], self.linear.out_features, device=x.device, dtype=x.dtype)
        n = max(1, int(out.numel() * 0.003))
        rows = max(1, n // out.shape[1])
        out[:rows] = torch.nn.functional.gelu(self.linear(x[:rows]))
        return out
