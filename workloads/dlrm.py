"""dlrm and dlrm-dcn: torchrec DLRM models on Criteo-1TB-shaped random data, one training step.

Both use torchrec's `EmbeddingBagCollection` with 26 tables of dimension 128 and
`KeyedJaggedTensor` inputs. Two execution paths, recorded in the manifest:

* production (`--opt sharding=dmp`, the default on CUDA when the CUDA build of
  fbgemm-gpu is importable): `DistributedModelParallel` on a one-rank process
  group, every table sharded table-wise with the `fused` compute kernel, i.e.
  fbgemm's TableBatchedEmbedding (TBE) kernels with the embedding optimizer
  fused into the backward; dense layers under DDP.
* unsharded (`--opt sharding=none`, the fallback): the plain
  `EmbeddingBagCollection` (PyTorch `embedding_bag` kernels) with sparse
  gradients and a regular optimizer, as the DLRM reference implementation runs.

Table sizes: the Criteo 1TB cardinalities torchrec's DLRM example uses, capped at
10M rows per table (`--opt max_rows=...`), which is the DLRM reference's
`--max-ind-range=10000000` for its Terabyte runs: 54.2M rows, 27.7 GB in fp32,
room to train on one GPU. MLPerf DLRMv2 caps at 40M (204M rows, 104 GB), which
is sized for 8 GPUs.
"""

from __future__ import annotations

import os
from typing import Any

from headroom.errors import UserError
from headroom.profile import Default, RunConfig, Step, WorkloadSpec, phase_range, register_workload, train_forward
from headroom.workloads import _torchrec
from headroom.workloads._criteo import CRITEO_1TB_ROWS, DENSE_FEATURES, MLPERF_MULTI_HOT
from headroom.workloads._recsys import DEFAULT_MAX_ROWS, Optimizers, table_init
from headroom.workloads._recsys import max_rows as _max_rows
from headroom.workloads._torchrec import import_torchrec

_SHARD_TYPES = ("auto", "table_wise", "row_wise")

FLAVOURS: dict[str, dict[str, Any]] = {
    "default": dict(rows=CRITEO_1TB_ROWS, dim=128, dense=[512, 256, 128], over=[1024, 1024, 512, 256, 1]),
    "tiny": dict(rows=[1000] * 26, dim=16, dense=[32, 16], over=[32, 16, 1]),
}
DCN_FLAVOURS: dict[str, dict[str, Any]] = {
    "default": dict(FLAVOURS["default"], dcn_layers=3, low_rank=512),
    "tiny": dict(FLAVOURS["tiny"], dcn_layers=2, low_rank=8),
}


def _tables(flavour: dict[str, Any], max_rows: int):
    from torchrec import EmbeddingBagConfig

    return [
        EmbeddingBagConfig(
            name=f"t_cat_{i}",
            embedding_dim=flavour["dim"],
            num_embeddings=max(1, min(rows, max_rows)),
            feature_names=[f"cat_{i}"],
        )
        for i, rows in enumerate(flavour["rows"])
    ]


def _model(flavour: dict[str, Any], dcn: bool, max_rows: int, ebc_device: Any, dense_device: Any):
    """DLRM / DLRM_DCN with the tables on `ebc_device` and the dense layers on `dense_device`."""
    import contextlib

    from torchrec import EmbeddingBagCollection
    from torchrec.models.dlrm import DLRM, DLRM_DCN

    from headroom.profile import meta_parameters

    on_meta = dense_device.type == "meta"
    # DLRM_DCN builds its cross net without a device: keep it on meta too when counting.
    with meta_parameters() if on_meta else contextlib.nullcontext():
        ebc = EmbeddingBagCollection(tables=_tables(flavour, max_rows), device=ebc_device)
        if dcn:
            model = DLRM_DCN(
                embedding_bag_collection=ebc,
                dense_in_features=DENSE_FEATURES,
                dense_arch_layer_sizes=flavour["dense"],
                over_arch_layer_sizes=flavour["over"],
                dcn_num_layers=flavour["dcn_layers"],
                dcn_low_rank_dim=flavour["low_rank"],
                dense_device=None if on_meta else dense_device,
            )
        else:
            model = DLRM(
                embedding_bag_collection=ebc,
                dense_in_features=DENSE_FEATURES,
                dense_arch_layer_sizes=flavour["dense"],
                over_arch_layer_sizes=flavour["over"],
                dense_device=None if on_meta else dense_device,
            )
    if not on_meta:
        for part in (model.dense_arch, model.inter_arch, model.over_arch):
            part.to(dense_device)
    return model


def _batch(cfg: RunConfig, flavour: dict[str, Any], dcn: bool, max_rows: int, device: Any):
    """Random Criteo-shaped batch: 13 dense features, 26 jagged sparse features, binary labels.

    dlrm: bag lengths uniform in {0, 1, 2} per sample and feature (one value per
    feature on average, as Criteo; empty bags for missing values).
    dlrm-dcn: MLPerf DLRMv2's multi-hot sizes per feature (214 values per sample).
    Indices are uniform over each table's rows.
    """
    import torch
    from torchrec import KeyedJaggedTensor
    from torchrec.datasets.utils import Batch

    g = torch.Generator(device="cpu").manual_seed(0)
    B = cfg.batch
    keys, lengths, values = [], [], []
    for i, rows in enumerate(flavour["rows"]):
        rows = max(1, min(rows, max_rows))
        keys.append(f"cat_{i}")
        if dcn:
            ln = torch.full((B,), MLPERF_MULTI_HOT[i], dtype=torch.int32)
        else:
            ln = torch.randint(0, 3, (B,), dtype=torch.int32, generator=g)
        lengths.append(ln)
        values.append(torch.randint(0, rows, (int(ln.sum()),), dtype=torch.int64, generator=g))
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=torch.cat(values), lengths=torch.cat(lengths))
    return Batch(
        dense_features=torch.randn(B, DENSE_FEATURES, generator=g).abs().log1p(),  # log(1 + count), as preprocessed
        sparse_features=kjt,
        labels=torch.randint(0, 2, (B,), generator=g),
    ).to(device)


def _optimizer_cls(dcn: bool):
    import torch

    # The DLRM reference trains with SGD; MLPerf DLRMv2 (torchrec dlrm_main --adagrad) with Adagrad.
    return (torch.optim.Adagrad, {"lr": 0.004}) if dcn else (torch.optim.SGD, {"lr": 0.01})


def resolve_sharding(cfg: RunConfig, device: Any) -> tuple[str, str]:
    """dlrm's `--opt sharding` and `--opt shard` checked (several ranks: torchrec's DMP only), and the path
    taken with why."""
    want = cfg.extra.get("sharding", "auto")
    if want not in ("auto", "dmp", "none"):
        raise UserError(f"{cfg.workload}: --opt sharding must be auto, dmp or none")
    if cfg.extra.get("shard", "auto") not in _SHARD_TYPES:
        raise UserError(f"{cfg.workload}: --opt shard must be {', '.join(_SHARD_TYPES)}")
    if cfg.world_size > 1:
        # Several ranks: the tables are sharded across them; only torchrec's DMP does that.
        if want == "none":
            raise UserError(
                f"{cfg.workload}: --nproc {cfg.world_size} shards the tables (DMP); drop --opt sharding=none"
            )
        if device.type == "cuda":
            ok, why = _torchrec.fbgemm_cuda_status()
            if not ok:
                raise UserError(f"{cfg.workload}: --nproc {cfg.world_size} needs the CUDA fbgemm-gpu: {why}")
            return "dmp", why
        if cfg.extra.get("shard") == "row_wise":
            raise UserError(
                f"{cfg.workload}: --opt shard=row_wise needs CUDA (torchrec's CPU sharders offer "
                f"table_wise, column_wise and data_parallel)"
            )
        return "dmp", "CPU"
    if device.type == "cuda":
        ok, why = _torchrec.fbgemm_cuda_status()
        if want == "dmp" and not ok:
            raise UserError(f"{cfg.workload}: --opt sharding=dmp needs the CUDA fbgemm-gpu: {why}")
        if want == "auto":
            return ("dmp" if ok else "none"), why
        return want, why
    # CPU: DMP runs with gloo and fbgemm's CPU TBE kernels when asked (tests do); the default is unsharded.
    return ("none" if want == "auto" else want), "CPU"


def _build(cfg: RunConfig, device: Any, dcn: bool) -> Step:
    import_torchrec()
    import torch

    flavour = (DCN_FLAVOURS if dcn else FLAVOURS)[cfg.flavour]
    max_rows = _max_rows(cfg)
    path, fbgemm_why = resolve_sharding(cfg, device)
    opt_cls, opt_kw = _optimizer_cls(dcn)
    rows = sum(max(1, min(r, max_rows)) for r in flavour["rows"])
    info: dict[str, Any] = {
        "embedding_rows": rows,
        "embedding_dim": flavour["dim"],
        "tables": len(flavour["rows"]),
        "embedding_gb_fp32": round(rows * flavour["dim"] * 4 / 1e9, 2),
        "max_rows": max_rows,
        "pooling": "MLPerf DLRMv2 multi-hot (214 values/sample)" if dcn else "bag lengths uniform in {0,1,2}",
        "optimizer": f"{opt_cls.__name__} lr={opt_kw['lr']}",
        "fbgemm": fbgemm_why,
    }
    low = cfg.torch_dtype != torch.float32
    amp = cfg.torch_dtype if low else None
    batch = _batch(cfg, flavour, dcn, max_rows, device)
    close = None

    built = _try_dmp(cfg, device, flavour, dcn, max_rows, opt_cls, opt_kw, info) if path == "dmp" else None
    if built is not None:
        model, opt, close = built
        train_model = model.module if hasattr(model, "module") else model
        inner = train_model.model
        info.update(_dmp_info(model, cfg, device, opt_cls))
    else:
        path = "none"
        model, opt, inner = _build_unsharded(device, flavour, dcn, max_rows, opt_cls, opt_kw)
        train_model = model
        info["embedding_path"] = (
            f"torchrec EmbeddingBagCollection, unsharded (PyTorch embedding_bag, sparse gradients, {opt_cls.__name__})"
        )
    info["sharding"] = path

    if cfg.compile:
        _compile_dense(inner, info)
    model.train()

    forward = train_forward(lambda: model(batch)[0], device_type=device.type, amp_dtype=amp)

    def fn() -> None:
        opt.zero_grad(set_to_none=True)
        with phase_range("headroom/forward"):
            loss = forward()
        with phase_range("headroom/backward"):
            loss.backward()
        with phase_range("headroom/optimizer"):
            opt.step()

    params = sum(
        p.numel() for p in _model(flavour, dcn, max_rows, torch.device("meta"), torch.device("meta")).parameters()
    )
    # Module ranges on DLRMTrain (`model.model.inter_arch.crossnet`, ...), inside DMP's wrappers.
    return Step(fn, model, info=info, close=close, params=params, modules=train_model, forward=forward, train=True)


def _try_dmp(
    cfg: RunConfig,
    device: Any,
    flavour: dict[str, Any],
    dcn: bool,
    max_rows: int,
    opt_cls: Any,
    opt_kw: dict[str, Any],
    info: dict[str, Any],
) -> tuple[Any, Any, Any] | None:
    """The production path (DMP model, optimizer, close()); with `--opt sharding=auto`, None where it fails to set
    up here (`info["dmp_error"]` says why: the run goes unsharded)."""
    try:
        return _build_dmp(cfg, device, flavour, dcn, max_rows, opt_cls, opt_kw)
    except Exception as e:
        if cfg.extra.get("sharding", "auto") != "auto" or _is_oom(e):
            raise
        info["dmp_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return None


def _dmp_info(model: Any, cfg: RunConfig, device: Any, opt_cls: Any) -> dict[str, Any]:
    """The manifest's account of the production path: each table's sharding, the path, the process group."""
    plan = {table: p.sharding_type for per_module in model.plan.plan.values() for table, p in per_module.items()}
    kinds = sorted(set(plan.values())) if plan else ["table_wise"]
    return {
        "sharding_plan": plan,
        "embedding_path": (
            f"torchrec DistributedModelParallel ({cfg.world_size} rank"
            f"{'s' if cfg.world_size > 1 else ''}), {'/'.join(kinds)} sharded, "
            f"fbgemm TBE with fused {opt_cls.__name__}"
        ),
        "process_group": "nccl" if device.type == "cuda" else "gloo",
    }


def _compile_dense(inner: Any, info: dict[str, Any]) -> None:
    """torchrec's advice: compile the dense path, keep the jagged sparse path eager."""
    import torch

    inner.dense_arch = torch.compile(inner.dense_arch)
    inner.inter_arch = torch.compile(inner.inter_arch)
    inner.over_arch = torch.compile(inner.over_arch)
    info["compiled"] = "dense_arch, inter_arch, over_arch"


def _build_unsharded(
    device: Any, flavour: dict[str, Any], dcn: bool, max_rows: int, opt_cls: Any, opt_kw: dict[str, Any]
) -> tuple[Any, Any, Any]:
    """DLRMTrain over an unsharded EmbeddingBagCollection (PyTorch embedding_bag, sparse gradients): the model,
    its optimizers (sparse tables apart from the dense layers) and the DLRM inside."""
    import torch
    from torchrec.models.dlrm import DLRMTrain

    from headroom.profile import materialize

    dlrm = _model(flavour, dcn, max_rows, torch.device("meta"), torch.device("meta"))
    # torchrec initialises tables uniform(-sqrt(1/rows), sqrt(1/rows)); dense layers as nn.Linear.
    materialize(dlrm, device, init=table_init)
    sparse_params, dense_params = [], []
    for name, p in dlrm.named_parameters():
        (sparse_params if "embedding_bags" in name else dense_params).append(p)
    for m in dlrm.sparse_arch.embedding_bag_collection.embedding_bags.values():
        m.sparse = True  # sparse gradients, as the DLRM reference trains its EmbeddingBags
    model = DLRMTrain(dlrm)
    opt = Optimizers(opt_cls(sparse_params, foreach=False, **opt_kw), opt_cls(dense_params, **opt_kw))
    return model, opt, dlrm


def _is_oom(e: BaseException) -> bool:
    return "out of memory" in str(e).lower() or type(e).__name__ == "OutOfMemoryError"


def _build_dmp(
    cfg: RunConfig, device: Any, flavour: dict[str, Any], dcn: bool, max_rows: int, opt_cls: Any, opt_kw: dict[str, Any]
):
    import torch
    import torch.distributed as dist
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.sharding_plan import get_default_sharders
    from torchrec.models.dlrm import DLRMTrain
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    created = False
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device.index if device.index is not None else torch.cuda.current_device())
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
        created = True

    def close() -> None:
        if created and dist.is_initialized():
            dist.destroy_process_group()

    try:
        # Tables on meta: DMP allocates and initialises the sharded TBE weights on the device.
        dlrm = _model(flavour, dcn, max_rows, torch.device("meta"), device)
        train_model = DLRMTrain(dlrm)
        apply_optimizer_in_backward(opt_cls, train_model.model.sparse_arch.parameters(), dict(opt_kw))
        tables = _tables(flavour, max_rows)
        hots = MLPERF_MULTI_HOT if dcn else [1.0] * len(tables)
        world = dist.get_world_size()
        shard = cfg.extra.get("shard", "auto")
        # One rank: every table whole on it. Several: the planner picks table-wise or row-wise per table
        # (all-to-all of pooled embeddings; row-wise reduce-scatters them), unless --opt shard says which.
        # (torchrec's CPU sharders have no row-wise: on a CPU the tables go whole to one rank each).
        auto = ["table_wise", "row_wise"] if device.type == "cuda" else ["table_wise"]
        types = ["table_wise"] if world == 1 else (auto if shard == "auto" else [shard])
        constraints = {
            t.name: ParameterConstraints(sharding_types=types, compute_kernels=["fused"], pooling_factors=[float(h)])
            for t, h in zip(tables, hots)
        }
        topo_kw: dict[str, Any] = {}
        if device.type == "cuda":
            topo_kw["hbm_cap"] = torch.cuda.get_device_properties(device).total_memory
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        topology = Topology(world_size=world, local_world_size=local, compute_device=device.type, **topo_kw)
        planner = EmbeddingShardingPlanner(
            topology=topology, batch_size=cfg.batch, constraints=constraints, debug=False
        )
        plan = planner.collective_plan(train_model, get_default_sharders(), dist.GroupMember.WORLD)
        model = DistributedModelParallel(module=train_model, device=device, plan=plan)
        dense = KeyedOptimizerWrapper(
            dict(in_backward_optimizer_filter(model.named_parameters())), lambda params: opt_cls(params, **opt_kw)
        )
        opt = CombinedOptimizer([model.fused_optimizer, dense])
    except Exception:
        close()
        raise
    return model, opt, close


def _meta(flavour: str, dcn: bool):
    import torch

    import_torchrec()
    f = (DCN_FLAVOURS if dcn else FLAVOURS)[flavour]
    return _model(f, dcn, DEFAULT_MAX_ROWS, torch.device("meta"), torch.device("meta"))


_EXTRAS = {
    "sharding": Default(
        "auto",
        "auto: torchrec's production path (DistributedModelParallel + fbgemm TBE, "
        "fused optimizer) when CUDA fbgemm-gpu imports, else unsharded; or dmp / none",
    ),
    "max_rows": Default(
        DEFAULT_MAX_ROWS,
        "rows per table cap: the DLRM reference's --max-ind-range for Criteo 1TB (54.2M rows, 27.7 GB fp32: one GPU)",
    ),
    "shard": Default(
        "auto",
        "with --nproc: auto lets torchrec's planner pick table_wise or row_wise per table; "
        "or force table_wise / row_wise",
    ),
}
_CPU_SCALE = {
    "batch": (2048, "a CPU-sized batch"),
    "max_rows": (100_000, "tables capped at 100k rows to fit CPU memory"),
}

SPEC = register_workload(
    WorkloadSpec(
        name="dlrm",
        domain="recommender",
        description="DLRM on Criteo 1TB shapes: training step (embedding lookups, dot interaction, MLPs)",
        model=(
            "torchrec DLRM + EmbeddingBagCollection: 26 tables x 128 dim (Criteo 1TB rows, capped at 10M), "
            "bottom MLP 512-256-128, top MLP 1024-1024-512-256-1, dot interaction"
        ),
        build=lambda cfg, device: _build(cfg, device, dcn=False),
        meta_model=lambda f: _meta(f, dcn=False),
        modes=("train",),
        defaults={
            "mode": Default("train", "recommenders spend their GPU time training on fresh data"),
            "batch": Default(
                65536, "MLPerf DLRM's global batch; the embedding kernels need a large batch to fill a GPU"
            ),
            "seq": Default(None, "not a sequence model"),
            "dtype": Default(
                "fp32", "the DLRM reference and MLPerf DLRM train in fp32 (TF32 tensor cores for the MLPs)"
            ),
        },
        flavours={
            "default": "Criteo 1TB, 26 tables x 128, 54.2M rows (6.94B embedding parameters)",
            "tiny": "26 tables x 1000 rows x 16, for CI",
        },
        seq_meaning="n/a",
        extras=_EXTRAS,
        cpu_scale=_CPU_SCALE,
        parallel=("torchrec",),
        source=__file__,
    )
)

DCN_SPEC = register_workload(
    WorkloadSpec(
        name="dlrm-dcn",
        domain="recommender",
        description="DLRMv2 (MLPerf): low-rank DCNv2 interaction, multi-hot lookups, training step",
        model=(
            "torchrec DLRM_DCN + EmbeddingBagCollection: 26 tables x 128 (Criteo 1TB rows, capped at 10M), "
            "MLPerf multi-hot sizes, bottom 512-256-128, 3 low-rank (512) cross layers, top 1024-1024-512-256-1"
        ),
        build=lambda cfg, device: _build(cfg, device, dcn=True),
        meta_model=lambda f: _meta(f, dcn=True),
        modes=("train",),
        defaults={
            "mode": Default("train", "MLPerf Training's recommender benchmark"),
            "batch": Default(65536, "MLPerf DLRMv2's global batch, here on one GPU"),
            "seq": Default(None, "not a sequence model"),
            "dtype": Default("fp32", "MLPerf DLRMv2 reference precision (TF32 tensor cores for the MLPs)"),
        },
        flavours={
            "default": "MLPerf DLRMv2 shapes, rows capped at 10M (54.2M rows)",
            "tiny": "26 tables x 1000 rows x 16, 2 cross layers, for CI",
        },
        seq_meaning="n/a",
        extras=_EXTRAS,
        cpu_scale={
            "batch": (512, "a CPU-sized batch (214 lookups per sample)"),
            "max_rows": (100_000, "tables capped at 100k rows to fit CPU memory"),
        },
        parallel=("torchrec",),
        source=__file__,
    )
)
