"""Is the substituted model the same model? Outputs (and, in training, gradients) on the workload's
own inputs, base against variant, within the dtype's tolerance.

What is compared (`Step.forward()`, the workload's own inputs, the same RNG seed for both):

* inference: every floating tensor the model returns (logits, hidden states); integer and
  bool outputs exactly;
* training: the loss; the gradient of every parameter (the same parameters in both: the
  candidates' are tied to the originals); and the gradients flowing into every replaced
  module's floating inputs (what its backward computes). Both forwards run before either
  backward, so optimizer-in-backward (torchrec's fused TBE) cannot change what the second
  forward reads.

A tensor passes when it is finite and its relative L2 error ``|a - b| / |b|`` is at most the
gate of the run's dtype (`GATES`): errors from re-associated float arithmetic, amplified
through a deep model, stay below it; a wrong result does not.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

# relative L2 error allowed per compared tensor, by the run's --dtype (docs/validate.md says why)
GATES = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 5e-2}
SEED = 20241201


@dataclass
class Compared:
    name: str
    rel_l2: float
    max_abs: float
    gate: float

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("name", "rel_l2", "max_abs", "gate", "passed")

    @property
    def passed(self) -> bool:
        return math.isfinite(self.rel_l2) and self.rel_l2 <= self.gate


@dataclass
class CheckResult:
    dtype: str
    gate: float
    compared: list[Compared] = field(default_factory=list)

    # `validate --json`'s "check": the verdict, the number of tensors compared and the worst of them.
    JSON_KEYS: ClassVar[tuple[str, ...]] = ("passed", "dtype", "gate", "tensors", "worst")

    @property
    def tensors(self) -> int:
        return len(self.compared)

    @property
    def passed(self) -> bool:
        return bool(self.compared) and all(c.passed for c in self.compared)

    @property
    def worst(self) -> Compared | None:
        bad = [c for c in self.compared if not c.passed]
        pool = bad or self.compared
        return max(pool, key=lambda c: c.rel_l2 if math.isfinite(c.rel_l2) else math.inf) if pool else None


def _tensors(out: Any, prefix: str = "output") -> Iterator[tuple[str, Any]]:
    """(name, tensor) for every tensor in a model output (tensors, tuples, dicts, ModelOutput)."""
    import torch

    if isinstance(out, torch.Tensor):
        yield prefix, out
    elif isinstance(out, dict) or hasattr(out, "items") and hasattr(out, "keys"):
        for k, v in out.items():
            yield from _tensors(v, f"{prefix}.{k}")
    elif isinstance(out, (tuple, list)):
        for i, v in enumerate(out):
            yield from _tensors(v, f"{prefix}[{i}]")


def compare_tensor(name: str, got: Any, want: Any, gate: float) -> Compared:
    import torch

    if got.shape != want.shape:
        return Compared(f"{name} (shape {tuple(got.shape)} vs {tuple(want.shape)})", math.inf, math.inf, gate)
    if got.is_sparse or want.is_sparse:
        diff = (got.coalesce() - want.coalesce()).coalesce().values().double()
        ref = want.coalesce().values().double()
    else:
        diff, ref = (got.double() - want.double()), want.double()
    if not (got.is_floating_point() or got.is_complex()):
        same = bool(torch.equal(got, want))
        return Compared(name, 0.0 if same else math.inf, 0.0 if same else float(diff.abs().max()), 0.0)
    if not bool(torch.isfinite(got.double() if not got.is_sparse else got.coalesce().values().double()).all()):
        return Compared(f"{name} (not finite)", math.inf, math.inf, gate)
    num = float(diff.norm())
    den = float(ref.norm())
    rel = num / den if den > 0 else (0.0 if num == 0 else math.inf)
    return Compared(name, rel, float(diff.abs().max()) if diff.numel() else 0.0, gate)


def _seeded(device: Any) -> None:
    import torch

    torch.manual_seed(SEED)
    if device.type == "cuda":
        torch.cuda.manual_seed_all(SEED)


def _input_grad_hooks(modules: list[Any], store: list) -> list[Any]:
    """Forward pre-hooks that save the gradient of each floating input that requires grad."""
    import torch

    def pre(_m, args, kwargs):
        for v in list(args) + list(kwargs.values()):
            if isinstance(v, torch.Tensor) and v.requires_grad and v.is_floating_point():
                slot = len(store)
                store.append(None)
                v.register_hook(lambda g, slot=slot: store.__setitem__(slot, g.detach().clone()))

    return [m.register_forward_pre_hook(pre, with_kwargs=True) for m in modules]


def _param_grads(model: Any) -> dict[str, Any]:
    out = {}
    for n, p in model.named_parameters():
        if p.grad is not None:
            out[n] = p.grad.detach().clone()
    return out


def check(
    step: Any,
    use: Callable[[str], None],
    modules: Callable[[], list[Any]],
    device: Any,
    dtype: str,
    gate: float | None = None,
) -> CheckResult:
    """Base vs variant on the step's own inputs (see the module docstring). `use(side)` switches the
    model; `modules()` lists the replaced modules active now."""
    import torch

    g = GATES.get(dtype, 1e-3) if gate is None else gate
    res = CheckResult(dtype, g)
    if step.forward is None:
        raise RuntimeError("the workload's Step has no forward(): it cannot be validated")
    if not step.train:
        outs = {}
        for side in ("base", "variant"):
            use(side)
            _seeded(device)
            outs[side] = [(n, t.detach().clone()) for n, t in _tensors(step.forward())]
        if len(outs["base"]) != len(outs["variant"]):
            res.compared.append(Compared("outputs (a different number of tensors)", math.inf, math.inf, g))
        for (n, want), (_, got) in zip(outs["base"], outs["variant"]):
            res.compared.append(compare_tensor(n, got, want, g))
        use("base")
        return res

    model = step.model
    with contextlib.ExitStack() as stack:
        # Both forwards run before either backward: DistributedDataParallel (torchrec's DMP wraps the
        # dense part in it, even on one rank) must not expect each forward's gradient reduction first.
        for m in model.modules():
            if isinstance(m, torch.nn.parallel.DistributedDataParallel):
                stack.enter_context(m.no_sync())
        losses, grads_in, params = _train_pass(step, use, modules, model, device)
    use("base")
    for p in model.parameters():
        p.grad = None
    res.compared.append(compare_tensor("loss", losses["variant"].detach(), losses["base"].detach(), g))
    b_in, v_in = grads_in["base"], grads_in["variant"]
    if len(b_in) != len(v_in) or any(x is None for x in b_in + v_in):
        res.compared.append(
            Compared(f"gradients into the replaced modules ({len(v_in)} vs {len(b_in)})", math.inf, math.inf, g)
        )
    else:
        for i, (want, got) in enumerate(zip(b_in, v_in)):
            res.compared.append(compare_tensor(f"d input {i} of the replaced modules", got, want, g))
    for n, want in params["base"].items():
        got = params["variant"].get(n)
        if got is None:
            res.compared.append(Compared(f"d {n} (no gradient in the variant)", math.inf, math.inf, g))
        else:
            res.compared.append(compare_tensor(f"d {n}", got, want, g))
    return res


def _train_pass(
    step: Any, use: Callable[[str], None], modules: Callable[[], list[Any]], model: Any, device: Any
) -> tuple[dict, dict, dict]:
    """Base and variant forwards (same seed), then their backwards: losses, input and parameter gradients."""
    import torch

    losses, grads_in, params = {}, {}, {}
    for side in ("base", "variant"):
        use(side)
        store: list = []
        handles = _input_grad_hooks(modules(), store)
        try:
            _seeded(device)
            losses[side] = step.forward()
        finally:
            for h in handles:
                h.remove()
        grads_in[side] = store
    for side in ("base", "variant"):
        use(side)
        for p in model.parameters():
            p.grad = None
        losses[side].backward()
        params[side] = _param_grads(model)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return losses, grads_in, params
