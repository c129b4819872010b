"""DLRM-Bench 09: jagged sum (segment sum over sequences).

Sums each of 16384 sequences of 0-200 rows of 128 floats (values (total, 128),
offsets (16385,)) into (16384, 128), as ``fbgemm::jagged_sum`` /
``aten::segment_reduce`` do for sum-pooled sequence features.

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

BATCH = 32 if _CPU else 16384
MAX_LEN = 12 if _CPU else 200
DIM = 8 if _CPU else 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, values, offsets):
        batch = offsets.numel() - 1
        row = torch.repeat_interleave(
            torch.arange(batch, device=values.device), offsets[1:] - offsets[:-1], output_size=values.shape[0]
        )
        out = torch.zeros(batch, values.shape[1], dtype=values.dtype, device=values.device)
        return out.index_add_(0, row, values)


def get_inputs():
    lengths = torch.randint(0, MAX_LEN + 1, (BATCH,))
    offsets = torch.zeros(BATCH + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, 0)
    return [torch.randn(int(offsets[-1]), DIM), offsets]


def get_init_inputs():
    return []
