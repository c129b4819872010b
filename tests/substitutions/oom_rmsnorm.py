"""Runs out of memory in forward (as an allocation on a full GPU would)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
