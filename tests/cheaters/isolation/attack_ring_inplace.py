"""Writes its input in place (``x.mul_``), the plain way to change what the reference reads next.

Expected: ``error`` (the child maps the ring read-only: the write faults, ``SIGSEGV``), never ``pass``;
with a writable mapping it failed ``no_input_mutation`` (the harness's digest of the ring).
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.nn.functional.gelu(self.linear(x))
        x.mul_(0.0)
        return out
