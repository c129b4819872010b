"""DLRM-Bench 01: multi-table pooled embedding bag (sum, variable bag lengths).

26 tables, dim 128, the MLPerf DLRM-DCNv2 (Criteo 1TB) table sizes capped at
1M rows (7.1M rows, 3.6 GB) and its multi-hot sizes as mean bag lengths
(lengths ~ U{0..2m}, ~14M lookups per batch of 65536). Inputs are a KJT-style
flat ``values`` tensor and per-(table, sample) ``lengths``, table-major. The
reference is what an unsharded torchrec ``EmbeddingBagCollection`` runs: one
``nn.EmbeddingBag`` call per table. Stands for ``aten::embedding_bag`` /
``_embedding_bag`` forward (fbgemm TBE forward in production).

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""
import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

MLPERF_ROWS = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209,
               11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36]
MULTI_HOT = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
ROW_CAP = 500 if _CPU else 1_000_000
TABLE_ROWS = [min(n, ROW_CAP) for n in MLPERF_ROWS]
DIM = 16 if _CPU else 128
BATCH = 24 if _CPU else 65536


class Model(nn.Module):
    def __init__(self, table_rows, dim):
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum") for n in table_rows)

    def forward(self, values, lengths):
        num_tables = len(self.tables)
        batch = lengths.numel() // num_tables
        per_table = lengths.view(num_tables, batch).sum(1).tolist()
        outs = []
        for t, (emb, vals) in enumerate(zip(self.tables, values.split(per_table))):
            lens = lengths[t * batch:(t + 1) * batch]
            offsets = torch.zeros_like(lens)
            offsets[1:] = torch.cumsum(lens, 0)[:-1]
            outs.append(emb(vals, offsets))
        return torch.stack(outs, dim=1)  # (batch, tables, dim)


def get_inputs():
    lengths = torch.cat([torch.randint(0, 2 * m + 1, (BATCH,)) for m in MULTI_HOT])
    per_table = lengths.view(len(TABLE_ROWS), BATCH).sum(1).tolist()
    values = torch.cat([torch.randint(0, n, (k,)) for n, k in zip(TABLE_ROWS, per_table)])
    return [values, lengths]


def get_init_inputs():
    return [TABLE_ROWS, DIM]
