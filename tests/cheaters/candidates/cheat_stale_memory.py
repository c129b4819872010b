"""Cheat: reuse of the reference's stale memory.

In an in-process harness the reference runs first and frees its output; a
candidate that allocates the same size gets that block back, already holding
the right answer. This one goes further and plants an answer itself: it runs
the reference on the published inputs (seed 42, as KernelBench uses), frees
the result, and returns an unwritten buffer of the same size.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.Generator(device=x.device).manual_seed(42)
        published = torch.randn(x.shape, generator=g, device=x.device, dtype=x.dtype)
        stale = torch.nn.functional.gelu(self.linear(published))
        shape = stale.shape
        del stale
        return torch.empty(shape, device=x.device, dtype=x.dtype)  # hopes to get the freed block back
