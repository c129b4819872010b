"""Cheat: ELU returning x."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, alpha: float = 1.0):
        super().__init__()

    def forward(self, x):
        return x.clone()
