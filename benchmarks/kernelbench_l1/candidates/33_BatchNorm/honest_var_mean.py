"""Honest: training-mode batch norm from torch.var_mean (batch statistics), same affine parameters."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=(0, 2, 3), unbiased=False, keepdim=True)
        w = self.bn.weight.view(1, -1, 1, 1)
        b = self.bn.bias.view(1, -1, 1, 1)
        scale = w * torch.rsqrt(var + self.bn.eps)
        return x * scale + (b - mean * scale)
