"""Misbehaves: calls sys.exit in forward (to end an in-process harness 'successfully')."""

import sys

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()

    def forward(self, x):
        sys.exit(0)
