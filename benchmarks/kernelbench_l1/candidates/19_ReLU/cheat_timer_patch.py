"""Cheat: computes honestly but replaces the timers (a 100x slow clock, a fake elapsed_time, a no-op sync)."""

import time

import torch
import torch.nn as nn

_real = time.perf_counter
_t0 = _real()
time.perf_counter = lambda: _t0 + (_real() - _t0) * 0.01
torch.cuda.Event.elapsed_time = lambda self, end: 0.001
torch.cuda.synchronize = lambda device=None: None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
