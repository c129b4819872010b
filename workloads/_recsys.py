"""What the torchrec workloads share: the `--opt max_rows` cap, their initialisation, and the training
step of a model whose tables take sparse gradients (one optimizer for them, one for the dense rest)."""

from __future__ import annotations

from typing import Any, Iterable

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
    from headroom.workloads.dlrm import fbgemm_cuda_status

    ok, why = fbgemm_cuda_status()
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


def sparse_table_step(cfg: RunConfig, device: Any, model: Any, tables: Iterable[Any], loss_fn: Any,
                      info: dict[str, Any]) -> Step:
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
    return Step(fn, model, info={**info, "optimizer": "Adagrad lr=0.01 (sparse on the tables)"}, forward=forward,
                train=True)
