"""Misbehaves: segfaults in forward."""

import ctypes

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()

    def forward(self, x):
        ctypes.string_at(0)  # SIGSEGV
        return x
