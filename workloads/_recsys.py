"""What the torchrec workloads share: the `--opt max_rows` cap, their initialisation, and the training
step of a model whose tables take sparse gradients (one optimizer for them, one for the dense rest)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from headroom.errors import UserError
from headroom.profile import Default, RunConfig, Step, train_forward, train_step

DEFAULT_MAX_ROWS = 10_000_000
# The spec fields the recommenders beyond dlrm share.
NO_SEQ = Default(None, "not a sequence model")
MAX_ROWS_OPT = {"max_rows": Default(DEFAULT_MAX_ROWS, "rows per table cap (as dlrm: 54.2M rows)")}
CPU_TABLES = (100_000, "tables capped at 100k rows")


def need_fbgemm_cuda(cfg: RunConfig, device: Any) -> None:
    """A workload whose model calls fbgemm ops needs fbgemm's CUDA kernels on a GPU (the CPU build
    registers the ops without them): say so in one line rather than fail inside the first step."""
    if device.type != "cuda":
        return
    from headroom.workloads import _torchrec

    ok, why = _torchrec.fbgemm_cuda_status()
    if not ok:
        raise UserError(f"{cfg.workload}: its fbgemm ops need the CUDA build of fbgemm-gpu on a GPU: {why}")


def max_rows(cfg: RunConfig) -> int:
    try:
        n = int(cfg.extra.get("max_rows", DEFAULT_MAX_ROWS))
    except ValueError:
        raise UserError(f"{cfg.workload}: --opt max_rows must be an integer") from None
    if n < 1:
        raise UserError(f"{cfg.workload}: --opt max_rows must be at least 1")
    return n


class Optimizers:
    """Several optimizers stepped as one (sparse tables and dense layers)."""

    def __init__(self, *opts):
        self.opts = opts

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.opts:
            o.step()


def table_init(module_name: str, param_name: str, module: Any, p: Any) -> None:
    """torchrec's table initialisation, uniform(-sqrt(1/rows), sqrt(1/rows)); dense layers as nn.Linear."""
    import math

    import torch

    with torch.no_grad():
        if "embedding_bags" in module_name or type(module).__name__ in ("Embedding", "EmbeddingBag"):
            bound = math.sqrt(1.0 / p.shape[0])
            p.uniform_(-bound, bound)
        elif param_name == "bias":
            p.zero_()
        else:
            bound = 1.0 / math.sqrt(p.shape[1]) if p.dim() > 1 else 0.1
            p.uniform_(-bound, bound)


def sparse_table_step(
    cfg: RunConfig, device: Any, model: Any, tables: Iterable[Any], loss_fn: Any, info: dict[str, Any]
) -> Step:
    """A training step: `tables` (nn.Embedding / nn.EmbeddingBag) with sparse gradients and sparse
    Adagrad, the other parameters with Adagrad; `loss_fn()` under autocast when the dtype is not fp32."""
    import torch

    tables = list(tables)
    for m in tables:
        m.sparse = True
    in_tables = {id(p) for m in tables for p in m.parameters()}
    sparse = [p for p in model.parameters() if id(p) in in_tables]
    dense = [p for p in model.parameters() if id(p) not in in_tables]
    opt = Optimizers(torch.optim.Adagrad(sparse, lr=0.01, foreach=False), torch.optim.Adagrad(dense, lr=0.01))
    amp = cfg.torch_dtype if cfg.torch_dtype != torch.float32 else None
    model.train()
    fn = train_step(model, loss_fn, opt, device_type=device.type, amp_dtype=amp)
    forward = train_forward(loss_fn, device_type=device.type, amp_dtype=amp)
    return Step(
        fn, model, info={**info, "optimizer": "Adagrad lr=0.01 (sparse on the tables)"}, forward=forward, train=True
    )


SHARDING_OPT = {
    "sharding": Default(
        "auto",
        "auto: torchrec's production path (DistributedModelParallel, fbgemm TBE "
        "with the optimizer fused) when CUDA fbgemm-gpu runs, else unsharded; "
        "or dmp / none",
    )
}


def resolve_sharding(cfg: RunConfig, device: Any) -> tuple[str, str]:
    """`--opt sharding`: dmp (torchrec's production path) or none (unsharded), and why."""
    want = cfg.extra.get("sharding", "auto")
    if want not in ("auto", "dmp", "none"):
        raise UserError(f"{cfg.workload}: --opt sharding must be auto, dmp or none")
    if device.type != "cuda":
        # A CPU runs DMP with gloo and fbgemm's CPU TBE kernels when asked (tests do); the default is unsharded.
        return ("none" if want == "auto" else want), "CPU"
    from headroom.workloads import _torchrec

    ok, why = _torchrec.fbgemm_cuda_status()
    if want == "dmp" and not ok:
        raise UserError(f"{cfg.workload}: --opt sharding=dmp needs the CUDA fbgemm-gpu: {why}")
    return (("dmp" if ok else "none") if want == "auto" else want), why


def dmp_model(
    cfg: RunConfig,
    device: Any,
    model: Any,
    sparse: Any,
    table_names: list[str],
    pooling_factors: list[float],
    opt_cls: Any,
    opt_kw: dict[str, Any],
):
    """`model` (its `sparse` EmbeddingBagCollection on meta, the rest on `device`) under torchrec's
    DistributedModelParallel on a one-rank process group: every table whole on the rank with the `fused`
    kernel (fbgemm TBE, `opt_cls` fused into the backward), the dense part under DDP with `opt_cls`.
    Returns (DMP model, the optimizer, close())."""
    import torch
    import torch.distributed as dist
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.sharding_plan import get_default_sharders
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    created = False
    if not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device.index if device.index is not None else torch.cuda.current_device())
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1
        )
        created = True

    def close() -> None:
        if created and dist.is_initialized():
            dist.destroy_process_group()

    try:
        apply_optimizer_in_backward(opt_cls, sparse.parameters(), dict(opt_kw))
        constraints = {
            name: ParameterConstraints(
                sharding_types=["table_wise"], compute_kernels=["fused"], pooling_factors=[float(h)]
            )
            for name, h in zip(table_names, pooling_factors)
        }
        topo_kw: dict[str, Any] = {}
        if device.type == "cuda":
            topo_kw["hbm_cap"] = torch.cuda.get_device_properties(device).total_memory
        topology = Topology(world_size=1, local_world_size=1, compute_device=device.type, **topo_kw)
        planner = EmbeddingShardingPlanner(
            topology=topology, batch_size=cfg.batch, constraints=constraints, debug=False
        )
        plan = planner.collective_plan(model, get_default_sharders(), dist.GroupMember.WORLD)
        dmp = DistributedModelParallel(module=model, device=device, plan=plan)
        dense = KeyedOptimizerWrapper(
            dict(in_backward_optimizer_filter(dmp.named_parameters())), lambda params: opt_cls(params, **opt_kw)
        )
        opt = CombinedOptimizer([dmp.fused_optimizer, dense])
    except Exception:
        close()
        raise
    return dmp, opt, close
