"""Honest: relu(1 - p * y).mean()."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.relu(1 - predictions * targets).mean()
