"""DLRM-Bench 11: permute pooled embeddings.

Pooled embeddings of 26 features (batch 65536, per-feature dims 32-256, 3168
columns) are reordered feature-wise, as ``fbgemm::permute_pooled_embs`` does
when a sharded model's output order differs from the order the over-arch
expects. The reference splits by feature and concatenates in the new order.

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

BATCH = 32 if _CPU else 65536
_BASE_DIMS = [
    128,
    64,
    128,
    256,
    32,
    128,
    64,
    128,
    128,
    256,
    64,
    128,
    32,
    128,
    128,
    64,
    256,
    128,
    32,
    128,
    128,
    256,
    64,
    128,
    128,
    64,
]
DIMS = [d // 16 for d in _BASE_DIMS] if _CPU else _BASE_DIMS
PERMUTE = [17, 3, 25, 8, 0, 12, 21, 5, 14, 1, 19, 10, 23, 6, 16, 2, 24, 9, 13, 20, 4, 11, 18, 7, 22, 15]


class Model(nn.Module):
    def __init__(self, dims, permute):
        super().__init__()
        self.dims = list(dims)
        self.permute = list(permute)

    def forward(self, pooled):
        parts = pooled.split(self.dims, dim=1)
        return torch.cat([parts[i] for i in self.permute], dim=1)


def get_inputs():
    return [torch.randn(BATCH, sum(DIMS))]


def get_init_inputs():
    return [DIMS, PERMUTE]
