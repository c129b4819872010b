"""Honest: torch.compile of the reference's forward (Inductor fuses it into one or two kernels)."""

import torch
import torch.nn as nn


def _rms(x, eps: float):
    return x / torch.sqrt(torch.mean(x**2, dim=1, keepdim=True) + eps)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self._fn = torch.compile(_rms, dynamic=False)

    def forward(self, x):
        return self._fn(x, self.eps)
