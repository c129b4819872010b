"""Honest: x * rsqrt(mean(x^2) + eps) (one kernel fewer)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.square().mean(dim=1, keepdim=True) + self.eps)
