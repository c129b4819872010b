"""Honest (for clamp_unit.py)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.relu(x), torch.ones((), device=x.device, dtype=x.dtype))
