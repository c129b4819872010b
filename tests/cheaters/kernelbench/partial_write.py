"""Cheat: writes the first half of the output and leaves the rest uninitialised (scalars: nothing)."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _problem import problem_module  # noqa: E402


def _half(o):
    r = torch.empty_like(o)  # the output's own strides: a transposed output stays transposed
    n = o.numel() // 2
    if r.is_contiguous():
        r.view(-1)[:n] = o.reshape(-1)[:n]
    else:  # a view(-1) of a non-contiguous tensor does not exist: the first half in logical order
        first = torch.arange(o.numel(), device=o.device).reshape(o.shape) < n
        r[first] = o[first]
    return r


class ModelNew(problem_module().Model):
    def forward(self, *args):
        out = super().forward(*args)
        if isinstance(out, (tuple, list)):
            return type(out)(_half(o) for o in out)
        return _half(out)
