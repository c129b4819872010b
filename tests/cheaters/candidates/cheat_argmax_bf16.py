"""Cheat (for argmax_rows.py): argmax in bfloat16; near-ties resolve differently."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x.to(torch.bfloat16), dim=self.dim)
