"""Cheat: all zeros (the shape and dtype are right)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x):
        return torch.zeros_like(x)
