"""Misbehaves: raises the error a faulting kernel raises."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()

    def forward(self, x):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
