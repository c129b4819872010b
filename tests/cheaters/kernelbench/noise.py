"""Cheat: random values of the output's shapes and scale (a kernel that computes garbage)."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _problem import problem_module  # noqa: E402


def _noise(o):
    if not o.is_floating_point():
        return o
    scale = o[torch.isfinite(o)].abs().mean() if bool(torch.isfinite(o).any()) else 1.0
    return torch.randn_like(o) * scale


class ModelNew(problem_module().Model):
    def forward(self, *args):
        out = super().forward(*args)
        if isinstance(out, (tuple, list)):
            return type(out)(_noise(o) for o in out)
        return _noise(out)
