"""DLRM-Bench 02: weighted mean pooling of one large embedding table.

A user-history feature: 2M rows x 128, bags of 0-100 ids per sample (batch
16384), each id with a positive weight (recency, counts); the pooled vector is
sum(w_i * e_i) / sum(w_i) (empty bags give zeros). ``nn.EmbeddingBag`` has no
weighted "mean" mode, so the reference pools with ``per_sample_weights`` and
divides by the per-bag weight sums, as torchrec weighted features do. Stands
for ``aten::embedding_bag`` forward with per-sample weights (fbgemm TBE
weighted forward).

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

ROWS = 1000 if _CPU else 2_000_000
DIM = 16 if _CPU else 128
BATCH = 32 if _CPU else 16384
MAX_LEN = 12 if _CPU else 100


class Model(nn.Module):
    def __init__(self, rows, dim):
        super().__init__()
        self.table = nn.EmbeddingBag(rows, dim, mode="sum", include_last_offset=True)

    def forward(self, indices, offsets, weights):
        pooled = self.table(indices, offsets, per_sample_weights=weights)
        batch = offsets.numel() - 1
        bag = torch.repeat_interleave(
            torch.arange(batch, device=indices.device), offsets[1:] - offsets[:-1], output_size=indices.numel()
        )
        wsum = torch.zeros(batch, dtype=weights.dtype, device=weights.device).index_add_(0, bag, weights)
        return pooled / wsum.clamp_min(1e-30).unsqueeze(1)


def get_inputs():
    lengths = torch.randint(0, MAX_LEN + 1, (BATCH,))
    offsets = torch.zeros(BATCH + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, 0)
    n = int(offsets[-1])
    indices = torch.randint(0, ROWS, (n,))
    weights = torch.rand(n) + 0.05
    return [indices, offsets, weights]


def get_init_inputs():
    return [ROWS, DIM]
