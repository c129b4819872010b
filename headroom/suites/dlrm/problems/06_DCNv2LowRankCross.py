"""DLRM-Bench 06: DCN-v2 low-rank cross network (MLPerf DLRM-DCNv2).

x_{l+1} = x_0 * (U_l (V_l x_l) + b_l) + x_l for 3 layers, input dim 3456
(128 dense + 26 x 128 sparse), rank 512, batch 65536, as torchrec's
``LowRankCrossNet``. Stands for the cross layers' GEMMs and element-wise
kernels (module ``LowRankCrossNet`` in a traced model).

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

BATCH = 32 if _CPU else 65536
IN_DIM = 48 if _CPU else 3456
RANK = 8 if _CPU else 512
LAYERS = 3


class Model(nn.Module):
    def __init__(self, in_dim, rank, layers):
        super().__init__()
        self.V = nn.ModuleList(nn.Linear(in_dim, rank, bias=False) for _ in range(layers))
        self.U = nn.ModuleList(nn.Linear(rank, in_dim, bias=True) for _ in range(layers))

    def forward(self, x0):
        x = x0
        for v, u in zip(self.V, self.U):
            x = x0 * u(v(x)) + x
        return x


def get_inputs():
    return [torch.randn(BATCH, IN_DIM)]


def get_init_inputs():
    return [IN_DIM, RANK, LAYERS]
