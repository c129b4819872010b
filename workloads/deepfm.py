"""deepfm: DeepFM on Criteo-shaped weighted multi-hot features, one training step.

torchrec's `EmbeddingBagCollection` with per-sample weights (`is_weighted=True`: each id of a bag
carries a positive weight, e.g. a count or a recency, and the bag is sum(w_i * e_i)), 26 tables of
dimension 128 with the Criteo 1TB cardinalities capped at 10M rows (as `dlrm`), MLPerf DLRMv2's
multi-hot sizes per feature. The 13 dense features become a 27th field through a linear layer; the
27 fields feed a factorization machine (module `FactorizationMachine`: 0.5 ((sum v)^2 - sum v^2),
summed over the dimension, as DeepFM) and a deep MLP 1024-512-256-1 over their concatenation; the
logit is their sum. Two embedding paths, as `dlrm` (`--opt sharding`, recorded in the manifest):

* production (the default on CUDA when the CUDA build of fbgemm-gpu runs): torchrec's
  `DistributedModelParallel` on a one-rank process group, every table whole on the rank with the
  `fused` kernel: fbgemm's weighted TBE (`split_embedding_codegen_forward_weighted`) with Adagrad
  fused into its backward; the dense layers under DDP with Adagrad.
* unsharded (the default on a CPU): PyTorch `embedding_bag` with `per_sample_weights`, sparse
  gradients, sparse Adagrad.
"""

from __future__ import annotations

import functools
from typing import Any

from headroom.profile import Default, RunConfig, Step, WorkloadSpec, register_workload, train_forward, train_step
from headroom.workloads._criteo import CRITEO_1TB_ROWS, DENSE_FEATURES, MLPERF_MULTI_HOT
from headroom.workloads._recsys import (
    CPU_TABLES,
    DEFAULT_MAX_ROWS,
    MAX_ROWS_OPT,
    NO_SEQ,
    SHARDING_OPT,
    dmp_model,
    max_rows,
    resolve_sharding,
    sparse_table_step,
    table_init,
)
from headroom.workloads._torchrec import import_torchrec

FLAVOURS: dict[str, dict[str, Any]] = {
    "default": dict(rows=CRITEO_1TB_ROWS, dim=128, hots=MLPERF_MULTI_HOT, deep=[1024, 512, 256, 1]),
    "tiny": dict(rows=[1000] * 26, dim=16, hots=[2] * 26, deep=[32, 16, 1]),
}


@functools.cache
def _fm_class() -> Any:
    """One FactorizationMachine class per process (made on first use: torch is imported lazily), so every
    model built holds the same class (`headroom validate --replace FactorizationMachine=...` finds it)."""
    import torch

    class FactorizationMachine(torch.nn.Module):
        """Second-order FM term of (batch, fields, dim) embeddings: 0.5 ((sum_f v)^2 - sum_f v^2), per dim."""

        def forward(self, v: torch.Tensor) -> torch.Tensor:
            s = v.sum(dim=1)
            return 0.5 * (s * s - (v * v).sum(dim=1))

    return FactorizationMachine


def _model(flavour: dict[str, Any], max_rows: int, device: Any):
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig

    FactorizationMachine = _fm_class()

    class DeepFM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dim, fields = flavour["dim"], len(flavour["rows"]) + 1
            tables = [
                EmbeddingBagConfig(
                    name=f"t_cat_{i}",
                    embedding_dim=dim,
                    feature_names=[f"cat_{i}"],
                    num_embeddings=max(1, min(rows, max_rows)),
                )
                for i, rows in enumerate(flavour["rows"])
            ]
            self.sparse_arch = EmbeddingBagCollection(tables=tables, is_weighted=True, device=device)
            self.dense_arch = torch.nn.Linear(DENSE_FEATURES, dim, device=device)
            self.fm = FactorizationMachine()
            layers: list[torch.nn.Module] = []
            sizes = [fields * dim] + flavour["deep"]
            for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
                layers.append(torch.nn.Linear(a, b, device=device))
                if i < len(sizes) - 2:
                    layers.append(torch.nn.ReLU())
            self.deep = torch.nn.Sequential(*layers)

        def forward(self, dense: torch.Tensor, sparse: Any) -> torch.Tensor:
            pooled = self.sparse_arch(sparse).values()  # (batch, 26 * dim), feature order
            v = torch.cat([self.dense_arch(dense).unsqueeze(1), pooled.view(dense.shape[0], -1, flavour["dim"])], dim=1)
            return self.fm(v).sum(dim=1) + self.deep(v.flatten(1)).squeeze(1)

    return DeepFM()


def _batch(cfg: RunConfig, flavour: dict[str, Any], max_rows: int, device: Any):
    """Bag lengths uniform in {0, ..., 2h} for a feature of mean multi-hot size h; weights uniform in (0.05, 1.05)."""
    import torch
    from torchrec import KeyedJaggedTensor

    g = torch.Generator(device="cpu").manual_seed(0)
    B = cfg.batch
    lengths, values = [], []
    for rows, hot in zip(flavour["rows"], flavour["hots"]):
        ln = torch.randint(0, 2 * hot + 1, (B,), dtype=torch.int32, generator=g)
        lengths.append(ln)
        values.append(torch.randint(0, max(1, min(rows, max_rows)), (int(ln.sum()),), generator=g))
    values_t = torch.cat(values)
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=[f"cat_{i}" for i in range(len(flavour["rows"]))],
        values=values_t,
        lengths=torch.cat(lengths),
        weights=torch.rand(values_t.numel(), generator=g) + 0.05,
    )
    dense = torch.randn(B, DENSE_FEATURES, generator=g).abs().log1p()
    labels = torch.randint(0, 2, (B,), generator=g).float()
    return dense.to(device), kjt.to(device), labels.to(device)


def _build(cfg: RunConfig, device: Any) -> Step:
    import_torchrec()
    import torch

    from headroom.profile import materialize

    flavour = FLAVOURS[cfg.flavour]
    cap = max_rows(cfg)
    path, why = resolve_sharding(cfg, device)
    model = _model(flavour, cap, torch.device("meta"))
    dense, kjt, labels = _batch(cfg, flavour, cap, device)
    rows = sum(max(1, min(r, cap)) for r in flavour["rows"])
    info: dict[str, Any] = {
        "embedding_rows": rows,
        "embedding_dim": flavour["dim"],
        "tables": len(flavour["rows"]),
        "max_rows": cap,
        "pooling": "weighted sum, multi-hot lengths uniform in {0..2h}",
        "fbgemm": why,
        "sharding": path,
    }

    def loss_of(m: Any) -> Any:
        return torch.nn.functional.binary_cross_entropy_with_logits(m(dense, kjt).float(), labels)

    if path == "none":
        materialize(model, device, init=table_init)
        info["embedding_path"] = (
            "torchrec EmbeddingBagCollection (is_weighted), unsharded: PyTorch embedding_bag "
            "with per_sample_weights, sparse gradients"
        )
        return sparse_table_step(
            cfg, device, model, model.sparse_arch.embedding_bags.values(), lambda: loss_of(model), info
        )
    # The tables stay on meta: DMP allocates and initialises the sharded TBE weights on the device.
    for part in (model.dense_arch, model.deep):
        materialize(part, device, init=table_init)
    names = [f"t_cat_{i}" for i in range(len(flavour["rows"]))]
    dmp, opt, close = dmp_model(
        cfg,
        device,
        model,
        model.sparse_arch,
        names,
        [float(h) for h in flavour["hots"]],
        torch.optim.Adagrad,
        {"lr": 0.01},
    )
    inner = dmp.module if hasattr(dmp, "module") else dmp
    info["embedding_path"] = (
        "torchrec DistributedModelParallel (1 rank), table_wise sharded, fbgemm weighted TBE with fused Adagrad"
    )
    info["process_group"] = "nccl" if device.type == "cuda" else "gloo"
    info["optimizer"] = "Adagrad lr=0.01 (fused into the TBE backward on the tables)"
    amp = cfg.torch_dtype if cfg.torch_dtype != torch.float32 else None
    dmp.train()
    fn = train_step(dmp, lambda: loss_of(dmp), opt, device_type=device.type, amp_dtype=amp)
    forward = train_forward(lambda: loss_of(dmp), device_type=device.type, amp_dtype=amp)
    params = sum(p.numel() for p in _model(flavour, cap, torch.device("meta")).parameters())
    # Module ranges on the model inside DMP's wrapper (`fm`, `deep`, `sparse_arch`).
    return Step(fn, dmp, info=info, close=close, params=params, modules=inner, forward=forward, train=True)


def _meta(flavour: str):
    import torch

    import_torchrec()
    return _model(FLAVOURS[flavour], DEFAULT_MAX_ROWS, torch.device("meta"))


SPEC = register_workload(
    WorkloadSpec(
        name="deepfm",
        domain="recommender",
        description="DeepFM with weighted multi-hot embedding bags and an FM interaction: training step",
        model=(
            "torchrec EmbeddingBagCollection (per-sample weights): 26 tables x 128 (Criteo 1TB rows, capped at "
            "10M), MLPerf multi-hot sizes; FactorizationMachine over 27 fields + deep MLP 1024-512-256-1"
        ),
        build=_build,
        meta_model=_meta,
        modes=("train",),
        defaults={
            "mode": Default("train", "CTR models are trained continuously on fresh logs"),
            "batch": Default(65536, "a DLRM-sized global batch: the embedding kernels need it to fill a GPU"),
            "seq": NO_SEQ,
            "dtype": Default("fp32", "CTR models train in fp32 (TF32 tensor cores for the MLPs)"),
        },
        flavours={
            "default": "Criteo 1TB, 26 weighted tables x 128, 54.2M rows",
            "tiny": "26 tables x 1000 x 16, for CI",
        },
        seq_meaning="n/a",
        extras={**MAX_ROWS_OPT, **SHARDING_OPT},
        cpu_scale={"batch": (1024, "a CPU-sized batch"), "max_rows": CPU_TABLES},
        source=__file__,
    )
)
