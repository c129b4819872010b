"""Small problem whose output has a large mean: x @ W^T + b + 1e5.

A constant (or per-column mean) output has a tiny relative L2 error here;
only the centred check catches it.
"""

import torch
import torch.nn as nn

BATCH = 256
IN_FEATURES = 64
OUT_FEATURES = 48
OFFSET = 1.0e5


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + OFFSET


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
