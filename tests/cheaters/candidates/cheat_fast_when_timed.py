"""Cheat: honest while checked, stale while timed.

It notices the harness's correctness phase (the command its caller's frame
serves is a Trial) and computes honestly; otherwise it replays its last
answer, which is fast and wrong.
"""

import sys

import torch
import torch.nn as nn


def _in_trial() -> bool:
    f = sys._getframe(1)
    while f is not None:
        cmd = f.f_locals.get("cmd")
        if cmd is not None and type(cmd).__name__ in ("Trial", "Run"):
            return type(cmd).__name__ == "Trial"
        f = f.f_back
    return True


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.last = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _in_trial() or self.last is None:
            self.last = torch.nn.functional.gelu(self.linear(x))
            return self.last
        return self.last
