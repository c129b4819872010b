"""Small problem whose published inputs live in [0, 1): clamp(x, 0, 1).

On the published distribution the identity function is exactly right; on any
other it is not.
"""

import torch
import torch.nn as nn

BATCH = 128
DIM = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=0.0, max=1.0)


def get_inputs():
    return [torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
