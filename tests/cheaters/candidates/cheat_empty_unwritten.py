"""Cheat: returns torch.empty, never written (whatever was in memory is the answer)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.out_features = out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty(x.shape[0], self.out_features, device=x.device, dtype=x.dtype)
