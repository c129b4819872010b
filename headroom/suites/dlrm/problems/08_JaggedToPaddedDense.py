"""DLRM-Bench 08: jagged -> padded dense.

A jagged tensor (values (total, 128), offsets (16385,)) of sequences of 0-100
items becomes a zero-padded (16384, 100, 128) tensor, what
``fbgemm::jagged_to_padded_dense`` does before a dense sequence model.

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

BATCH = 24 if _CPU else 16384
MAX_LEN = 10 if _CPU else 100
DIM = 8 if _CPU else 128


class Model(nn.Module):
    def __init__(self, max_len):
        super().__init__()
        self.max_len = max_len

    def forward(self, values, offsets):
        batch = offsets.numel() - 1
        total = values.shape[0]
        row = torch.repeat_interleave(
            torch.arange(batch, device=values.device), offsets[1:] - offsets[:-1], output_size=total
        )
        pos = torch.arange(total, device=values.device) - offsets[:-1][row]
        out = torch.zeros(batch, self.max_len, values.shape[1], dtype=values.dtype, device=values.device)
        out[row, pos] = values
        return out


def get_inputs():
    lengths = torch.randint(0, MAX_LEN + 1, (BATCH,))
    offsets = torch.zeros(BATCH + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, 0)
    return [torch.randn(int(offsets[-1]), DIM), offsets]


def get_init_inputs():
    return [MAX_LEN]
