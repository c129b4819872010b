"""Cheat: result cache keyed on (data_ptr, shape): replays an old answer when memory is reused."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if key not in self.cache:
            self.cache.clear()
            self.cache[key] = F.gelu(x, approximate="tanh")
        return self.cache[key]
