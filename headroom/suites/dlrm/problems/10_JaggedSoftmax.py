"""DLRM-Bench 10: jagged softmax.

Softmax over each sequence (per column) of a jagged tensor: values
(total, 128) for 16384 sequences of 1-50 items, output of the same jagged
shape, as ``fbgemm::jagged_softmax``. The output is a probability per item
(mean 1/length, positive: the one DLRM-Bench output that is not zero-mean;
sequences are short, so values are O(0.1) and an all-zeros output fails even
an absolute-tolerance check).

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

BATCH = 32 if _CPU else 16384
MAX_LEN = 10 if _CPU else 50
DIM = 8 if _CPU else 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, values, offsets):
        batch = offsets.numel() - 1
        dim = values.shape[1]
        row = torch.repeat_interleave(
            torch.arange(batch, device=values.device), offsets[1:] - offsets[:-1], output_size=values.shape[0]
        )
        idx = row.unsqueeze(1).expand(-1, dim)
        seg_max = torch.full((batch, dim), float("-inf"), dtype=values.dtype, device=values.device)
        seg_max = seg_max.scatter_reduce(0, idx, values, reduce="amax", include_self=True)
        e = torch.exp(values - seg_max[row])
        seg_sum = torch.zeros(batch, dim, dtype=values.dtype, device=values.device).index_add_(0, row, e)
        return e / seg_sum[row]


def get_inputs():
    lengths = torch.randint(1, MAX_LEN + 1, (BATCH,))
    offsets = torch.zeros(BATCH + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, 0)
    return [torch.randn(int(offsets[-1]), DIM), offsets]


def get_init_inputs():
    return []
