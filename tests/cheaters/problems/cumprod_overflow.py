"""Small problem whose float32 answer overflows: the cumulative product of 64 values of scale ~1e3.

The float64 truth reaches ~1e192; float32 holds inf past ~1e38 (about the 13th element), as the
reference computes it. An honest candidate matches those infinities; zeros or noise do not.
"""

import torch
import torch.nn as nn

ROWS = 16
LENGTH = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x * 1000.0, dim=1)


def get_inputs():
    return [torch.rand(ROWS, LENGTH) + 0.5]


def get_init_inputs():
    return []
