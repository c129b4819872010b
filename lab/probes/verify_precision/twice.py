"""Correct, and twice the work (the product computed twice, the second kept): verify must say ~0.5x."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = torch.matmul(a, b)
        return torch.matmul(a, b) + 0.0 * c[:1, :1]
