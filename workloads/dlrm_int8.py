"""dlrm-int8: DLRM inference with int8 row-wise quantized tables in fbgemm's inference TBE.

Serving stacks quantize a recommender's tables after training: each row becomes int8 with a scale
and a bias (fbgemm's 8-bit row-wise format), and the lookups run in fbgemm's
`IntNBitTableBatchedEmbeddingBagsCodegen` (`fbgemm::int_nbit_split_embedding_codegen_lookup_function`,
on CUDA and on CPU). Small tables gain nothing from quantization and stay fp16, in a second TBE:
the lookups are grouped by weight type, as torchrec's quantized sharding groups them, and the
pooled outputs come back in group order. `fbgemm::permute_pooled_embs` (module
`PermutePooledEmbeddings`) puts them back in feature order before the dot interaction, as a sharded
model's output is permuted. Then torchrec's DLRM dense, interaction and over arches.

Tables: the Criteo 1TB cardinalities capped at 10M rows (as `dlrm`; 54.2M rows, 7.2 GB in int8),
dimension 128; tables of fewer than 10k rows are fp16. Bags: MLPerf DLRMv2's multi-hot sizes.
"""

from __future__ import annotations

from typing import Any

from headroom.profile import Default, RunConfig, Step, WorkloadSpec, infer_step, register_workload
from headroom.workloads._criteo import CRITEO_1TB_ROWS, DENSE_FEATURES, MLPERF_MULTI_HOT
from headroom.workloads._recsys import CPU_TABLES, DEFAULT_MAX_ROWS, MAX_ROWS_OPT, NO_SEQ, max_rows, need_fbgemm_cuda
from headroom.workloads._torchrec import import_torchrec

FP16_BELOW = 10_000
FLAVOURS: dict[str, dict[str, Any]] = {
    "default": dict(
        rows=CRITEO_1TB_ROWS, dim=128, hots=MLPERF_MULTI_HOT, dense=[512, 256, 128], over=[1024, 1024, 512, 256, 1]
    ),
    "tiny": dict(rows=[20000, 500] * 13, dim=16, hots=[2] * 26, dense=[32, 16], over=[32, 16, 1]),
}


def _groups(rows: list[int]) -> tuple[list[int], list[int]]:
    """Feature indices of the int8 group and of the fp16 group."""
    big = [i for i, r in enumerate(rows) if r >= FP16_BELOW]
    return big, [i for i, r in enumerate(rows) if r < FP16_BELOW]


def _model(f: dict[str, Any], max_rows: int, device: Any, dtype: Any, tables: bool = True):
    import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)
    import torch
    from torchrec.models.dlrm import DenseArch, InteractionArch, OverArch

    rows = [max(1, min(r, max_rows)) for r in f["rows"]]
    dim, n = f["dim"], len(rows)
    groups = [g for g in _groups(rows) if g]
    order = [i for g in groups for i in g]  # the features in group order

    class PermutePooledEmbeddings(torch.nn.Module):
        """Pooled embeddings (batch, features x dim) from group order back to feature order."""

        def __init__(self) -> None:
            super().__init__()
            offsets = torch.arange(n + 1, dtype=torch.int64) * dim  # every feature is `dim` wide
            back = torch.tensor([order.index(i) for i in range(n)], dtype=torch.int64)
            inverse = torch.tensor(order, dtype=torch.int64)
            for name, t in (
                ("offsets", offsets),
                ("permute", back),
                ("inv_offsets", offsets),
                ("inv_permute", inverse),
            ):
                self.register_buffer(name, t.to(device if device.type != "meta" else "cpu"))

        def forward(self, pooled: torch.Tensor) -> torch.Tensor:
            return torch.ops.fbgemm.permute_pooled_embs(
                pooled, self.offsets, self.permute, self.inv_offsets, self.inv_permute
            )

    class QuantEmbeddingBags(torch.nn.Module):
        """One inference TBE per weight type: int8 row-wise for the large tables, fp16 for the small ones."""

        def __init__(self) -> None:
            super().__init__()
            from fbgemm_gpu.split_embedding_configs import SparseType
            from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
            from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen

            loc = EmbeddingLocation.DEVICE if device.type == "cuda" else EmbeddingLocation.HOST
            out = {torch.float16: SparseType.FP16, torch.bfloat16: SparseType.BF16}.get(dtype, SparseType.FP32)
            self.sizes = [len(g) for g in groups]
            self.tbes = torch.nn.ModuleList()
            for g in groups:
                wt = SparseType.INT8 if rows[g[0]] >= FP16_BELOW else SparseType.FP16
                tbe = IntNBitTableBatchedEmbeddingBagsCodegen(
                    [(f"t_cat_{i}", rows[i], dim, wt, loc) for i in g],
                    output_dtype=out,
                    device=device if device.type == "cuda" else "cpu",
                )
                tbe.fill_random_weights()
                self.tbes.append(tbe)

        def forward(self, kjt: Any) -> torch.Tensor:
            parts = kjt.split(self.sizes)
            return torch.cat([tbe(p.values().int(), p.offsets().int()) for tbe, p in zip(self.tbes, parts)], dim=1)

    class DLRMInt8(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if tables:
                self.sparse_arch = QuantEmbeddingBags()
            self.permute = PermutePooledEmbeddings()
            self.dense_arch = DenseArch(DENSE_FEATURES, f["dense"], device=device)
            self.inter_arch = InteractionArch(num_sparse_features=n)
            self.over_arch = OverArch(dim + (n + 1) * n // 2, f["over"], device=device)

        def forward(self, dense: torch.Tensor, kjt: Any) -> torch.Tensor:
            pooled = self.permute(self.sparse_arch(kjt)).view(dense.shape[0], n, dim)
            return self.over_arch(self.inter_arch(self.dense_arch(dense), pooled)).squeeze(1)

    return DLRMInt8(), order


def _batch(cfg: RunConfig, f: dict[str, Any], max_rows: int, order: list[int], device: Any, dtype: Any):
    """Bags of the features in group order (as the input distribution hands them to each TBE group)."""
    import torch
    from torchrec import KeyedJaggedTensor

    g = torch.Generator(device="cpu").manual_seed(0)
    B = cfg.batch
    lengths, values = [], []
    for i in order:
        ln = torch.randint(0, 2 * f["hots"][i] + 1, (B,), dtype=torch.int32, generator=g)
        lengths.append(ln)
        values.append(torch.randint(0, max(1, min(f["rows"][i], max_rows)), (int(ln.sum()),), generator=g))
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=[f"cat_{i}" for i in order], values=torch.cat(values), lengths=torch.cat(lengths)
    )
    dense = torch.randn(B, DENSE_FEATURES, generator=g).abs().log1p()
    return dense.to(device=device, dtype=dtype), kjt.to(device)


def _build(cfg: RunConfig, device: Any) -> Step:
    import_torchrec()
    need_fbgemm_cuda(cfg, device)
    f = FLAVOURS[cfg.flavour]
    cap = max_rows(cfg)
    dtype = cfg.torch_dtype
    model, order = _model(f, cap, device, dtype)
    model.dense_arch.to(dtype)
    model.over_arch.to(dtype)
    model.eval()
    dense, kjt = _batch(cfg, f, cap, order, device, dtype)
    rows = [max(1, min(r, cap)) for r in f["rows"]]
    big, small = _groups(rows)
    info = {
        "embedding_path": "fbgemm IntNBitTableBatchedEmbeddingBagsCodegen: int8 row-wise tables "
        f"({len(big)}) + fp16 tables ({len(small)}), permute_pooled_embs to feature order",
        "embedding_rows": sum(rows),
        "embedding_gb_int8": round(sum(rows[i] for i in big) * (f["dim"] + 4) / 1e9, 2),
        "max_rows": cap,
    }
    return Step(infer_step(lambda: model(dense, kjt)), model, info=info, forward=lambda: model(dense, kjt))


def _meta(flavour: str):
    import torch

    import_torchrec()
    return _model(FLAVOURS[flavour], DEFAULT_MAX_ROWS, torch.device("meta"), torch.float16, tables=False)[0]


SPEC = register_workload(
    WorkloadSpec(
        name="dlrm-int8",
        domain="recommender",
        description="DLRM inference on int8 row-wise quantized tables (fbgemm inference TBE) + permuted pooled embeddings",
        model=(
            "fbgemm IntNBitTableBatchedEmbeddingBagsCodegen: 26 tables x 128 (Criteo 1TB rows, capped at 10M), "
            "int8 row-wise (fp16 below 10k rows), MLPerf multi-hot sizes; permute_pooled_embs; torchrec DLRM "
            "bottom 512-256-128, dot interaction, top 1024-1024-512-256-1"
        ),
        build=_build,
        meta_model=_meta,
        modes=("infer",),
        defaults={
            "mode": Default("infer", "quantized tables are a serving format"),
            "batch": Default(65536, "a large offline-serving batch, as MLPerf Inference's DLRMv2 offline scenario"),
            "seq": NO_SEQ,
            "dtype": Default("fp16", "the dense layers and the pooled outputs in fp16, as quantized serving runs"),
        },
        flavours={
            "default": "Criteo 1TB, 26 tables x 128, 54.2M rows (7.2 GB int8)",
            "tiny": "13 int8 tables x 20000 + 13 fp16 tables x 500, dim 16, for CI",
        },
        seq_meaning="n/a",
        extras=MAX_ROWS_OPT,
        cpu_scale={"batch": (1024, "a CPU-sized batch"), "max_rows": CPU_TABLES, "dtype": ("fp32", "fast on any CPU")},
        source=__file__,
    )
)
