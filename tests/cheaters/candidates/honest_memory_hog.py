"""Honest but wasteful: correct output, plus a 32 MiB scratch buffer per call (flagged: memory)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scratch = torch.ones(32 << 18, device=x.device)  # 32 MiB of float32, touched
        y = torch.nn.functional.gelu(self.linear(x))
        return y + scratch[:1] * 0
