"""DLRM-Bench 04: the DLRM dot interaction (forward).

Z = [dense; 26 pooled embeddings] is (65536, 27, 128); the interaction is
bmm(Z, Z^T) followed by the lower-triangle gather Z Z^T[:, li, lj] (351
pairs), concatenated after the dense features: (65536, 479). Stands for the
``aten::bmm`` and ``aten::index`` kernels of DLRM's interaction forward.

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

BATCH = 32 if _CPU else 65536
NUM_SPARSE = 26
DIM = 16 if _CPU else 128


class Model(nn.Module):
    li: torch.Tensor
    lj: torch.Tensor

    def __init__(self, num_features):
        super().__init__()
        li, lj = torch.tril_indices(num_features, num_features, offset=-1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)

    def forward(self, dense, sparse):
        z = torch.cat([dense.unsqueeze(1), sparse], dim=1)
        zz = torch.bmm(z, z.transpose(1, 2))
        return torch.cat([dense, zz[:, self.li, self.lj]], dim=1)


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, NUM_SPARSE, DIM)]


def get_init_inputs():
    return [NUM_SPARSE + 1]
