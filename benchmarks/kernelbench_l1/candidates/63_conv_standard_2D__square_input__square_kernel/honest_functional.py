"""Honest: F.conv2d with the module's weights (cuDNN, TF32 under the headline settings)."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, (kernel_size, kernel_size), bias=False)  # as Model

    def forward(self, x):
        return F.conv2d(x, self.conv2d.weight, self.conv2d.bias)
