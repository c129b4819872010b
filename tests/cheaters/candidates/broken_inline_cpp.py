"""A candidate whose extension does not compile (the build error must reach the verdict's reason; a missing
header fails at once)."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include "headroom_missing_header.h"
#include <torch/extension.h>
torch::Tensor gelu_erf(torch::Tensor y) { return y; }
"""

_ext = load_inline(name="headroom_test_broken", cpp_sources=_SRC, functions=["gelu_erf"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _ext.gelu_erf(self.linear(x))
