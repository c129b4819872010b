"""Honest, compiled: GELU(x W^T + b) with the GELU in a C++ extension built by load_inline (CPU)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
torch::Tensor gelu_erf(torch::Tensor y) {
    return 0.5 * y * (1.0 + torch::erf(y * 0.7071067811865476));
}
"""

_ext = load_inline(name="headroom_test_gelu", cpp_sources=_SRC, functions=["gelu_erf"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.gelu_erf(self.linear(x))
