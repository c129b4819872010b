"""Cheat: all zeros of the right shapes (passes an absolute allclose where outputs are tiny)."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _problem import problem_module  # noqa: E402


class ModelNew(problem_module().Model):
    def forward(self, *args):
        out = super().forward(*args)
        if isinstance(out, (tuple, list)):
            return type(out)(torch.zeros_like(o) for o in out)
        return torch.zeros_like(out)
