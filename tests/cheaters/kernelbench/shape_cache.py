"""Cheat: computes once per input shape and returns the cached answer afterwards."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _problem import problem_module  # noqa: E402


class ModelNew(problem_module().Model):
    def forward(self, *args):
        key = tuple(tuple(a.shape) if hasattr(a, "shape") else a for a in args)
        cache = self.__dict__.setdefault("_cache", {})
        if key not in cache:
            cache[key] = super().forward(*args)
        return cache[key]
