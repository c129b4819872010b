"""DLRM-Bench 05: backward of the DLRM dot interaction.

Given Z (65536, 27, 128) and the gradient of the 351 interaction outputs,
compute dZ exactly as autograd does: the backward of the triangle gather
(zeros + ``index_put_`` with accumulate=True: a sort plus
``indexing_backward_kernel`` on CUDA) and the two bmm's of bmm(Z, Z^T)'s
backward. In our DLRM training profile (H200, batch 65536) this gather
backward is the single largest kernel (25% of GPU time, 28% with fbgemm TBE).
Stands for ``IndexBackward0`` / ``aten::index_put_`` (+ the interaction's
backward bmm's).

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

BATCH = 32 if _CPU else 65536
NUM_FEATURES = 27
DIM = 16 if _CPU else 128


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        li, lj = torch.tril_indices(num_features, num_features, offset=-1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)

    def forward(self, z, grad_inter):
        batch, f, _ = z.shape
        g = torch.zeros(batch, f, f, dtype=z.dtype, device=z.device)
        torch.ops.aten.index_put_(g, [None, self.li, self.lj], grad_inter, True)  # IndexBackward0
        return torch.bmm(g, z) + torch.bmm(g.transpose(1, 2), z)  # BmmBackward0 (both operands are z)


def get_inputs():
    pairs = NUM_FEATURES * (NUM_FEATURES - 1) // 2
    return [torch.randn(BATCH, NUM_FEATURES, DIM), torch.randn(BATCH, pairs)]


def get_init_inputs():
    return [NUM_FEATURES]
