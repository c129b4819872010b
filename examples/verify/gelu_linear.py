"""A small KernelBench-format problem: GELU(x @ W^T + b). `headroom verify` takes its file as PROBLEM."""

import torch
import torch.nn as nn

BATCH = 256
IN_FEATURES = 128
OUT_FEATURES = 96


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
