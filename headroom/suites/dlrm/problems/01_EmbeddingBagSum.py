"""DLRM-Bench 01: multi-table pooled embedding bag (sum, variable bag lengths).

26 tables, dim 128, the MLPerf DLRM-DCNv2 (Criteo 1TB) table sizes capped at
1M rows (7.1M rows, 3.6 GB) and its multi-hot sizes as mean bag lengths
(lengths ~ U{0..2m}, ~14M lookups per batch of 65536). Inputs are a KJT-style
flat ``values`` tensor and per-(table, sample) ``lengths``, table-major: the
layout fbgemm's table-batched embedding (TBE) takes. The reference is what the
``dlrm`` workload's production path runs (torchrec ``DistributedModelParallel``
with the ``fused`` kernel): one ``SplitTableBatchedEmbeddingBagsCodegen``
forward over all 26 tables (``split_embedding_codegen_forward_unweighted`` on
CUDA, fbgemm's CPU kernel on a CPU). The table weights are made as 26
``nn.EmbeddingBag`` tables, in order, and copied into the TBE, so a candidate
that makes the same tables has the same weights. Where fbgemm-gpu does not
import (or has no CUDA kernels on a GPU) the reference is what the unsharded
``EmbeddingBagCollection`` runs instead, one ``nn.EmbeddingBag`` call per table
(``REFERENCE`` says which). Stands for the TBE forward (``aten::embedding_bag``
forward on the unsharded path).

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

MLPERF_ROWS = [
    40000000,
    39060,
    17295,
    7424,
    20265,
    3,
    7122,
    1543,
    63,
    40000000,
    3067956,
    405282,
    10,
    2209,
    11938,
    155,
    4,
    976,
    14,
    40000000,
    40000000,
    40000000,
    590152,
    12973,
    108,
    36,
]
MULTI_HOT = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
ROW_CAP = 500 if _CPU else 1_000_000
TABLE_ROWS = [min(n, ROW_CAP) for n in MLPERF_ROWS]
DIM = 16 if _CPU else 128
BATCH = 24 if _CPU else 65536


def _tbe_modules():
    """fbgemm's training TBE and its enums, or None where fbgemm-gpu does not import."""
    try:
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice,
            EmbeddingLocation,
            PoolingMode,
            SplitTableBatchedEmbeddingBagsCodegen,
        )
    except Exception:  # ImportError, or OSError for a build against another torch
        return None
    return SplitTableBatchedEmbeddingBagsCodegen, ComputeDevice, EmbeddingLocation, PoolingMode


def _tbe_runs_on(device):
    if _tbe_modules() is None:
        return False
    if device.type != "cuda":
        return True
    try:  # the CPU build of fbgemm-gpu registers the ops without CUDA kernels
        torch.ops.fbgemm.asynchronous_complete_cumsum(torch.ones(2, dtype=torch.int64, device=device))
        return True
    except Exception:
        return False


REFERENCE = "fbgemm TBE" if _tbe_modules() is not None else "nn.EmbeddingBag per table"


class Model(nn.Module):
    def __init__(self, table_rows, dim):
        super().__init__()
        tables = [nn.EmbeddingBag(n, dim, mode="sum") for n in table_rows]  # the weights, table by table
        device = tables[0].weight.device
        self.num_tables, self.dim = len(tables), dim
        self.tbe = None
        if _tbe_runs_on(device):
            tbe_cls, compute, location, pooling = _tbe_modules()
            on_gpu = device.type == "cuda"
            self.tbe = tbe_cls(
                [
                    (n, dim, location.DEVICE if on_gpu else location.HOST, compute.CUDA if on_gpu else compute.CPU)
                    for n in table_rows
                ],
                pooling_mode=pooling.SUM,
                device=device,
            )
            with torch.no_grad():
                for w, t in zip(self.tbe.split_embedding_weights(), tables):
                    w.copy_(t.weight)
        else:
            self.tables = nn.ModuleList(tables)

    def forward(self, values, lengths):
        if self.tbe is not None:
            offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=lengths.device)
            offsets[1:] = torch.cumsum(lengths, 0)
            out = self.tbe(values, offsets)  # (batch, tables * dim)
            return out.view(out.shape[0], self.num_tables, self.dim)
        num_tables = len(self.tables)
        batch = lengths.numel() // num_tables
        per_table = lengths.view(num_tables, batch).sum(1).tolist()
        outs = []
        for t, (emb, vals) in enumerate(zip(self.tables, values.split(per_table))):
            lens = lengths[t * batch : (t + 1) * batch]
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
