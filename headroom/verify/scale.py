"""How big a problem is before anything is allocated, and a scaled instance for a CPU.

``estimate`` runs the problem on PyTorch's ``meta`` device — construction,
``get_inputs()`` and one forward, with ``FlopCounterMode`` — so the sizes of
parameters, inputs and outputs (and the matmul/convolution FLOPs) are known
without allocating a byte. The harness's peak is then about
``HARNESS_FACTORS``: the float64 truth doubles parameters, inputs and outputs,
and the comparison holds the reference's output, the truth and the
candidate's output at once.

``plan`` scales a problem for a CPU: KernelBench files put their sizes in
module-level assignments (``batch_size = 4096``, ``input_shape = (8192,)``).
The largest such integer (>= 32; tuples element-wise) is halved (all sizes
within 2x of it at once while far from the budget), the module
re-executed with the new values (``problem.load_problem(overrides=...)``, so
sizes computed from others follow) and re-estimated, until the estimate fits
the budget. A value whose halving breaks the problem (the meta forward
raises) is left alone. Values below 32 (kernel sizes, dims, groups) are never
touched, and sizes are halved no lower than 2. The problem file itself is not changed; the overrides are recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from headroom.verify import problem as prob

MIN_SCALABLE = 32
FLOOR = 2
# harness peak ~ params * a + inputs * b + outputs * c (see the module docstring)
HARNESS_FACTORS = (3.0, 3.0, 5.0)


@dataclass
class Estimate:
    params_bytes: int
    inputs_bytes: int
    outputs_bytes: int
    flops: int | None

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "params_bytes",
        "inputs_bytes",
        "outputs_bytes",
        "flops",
        "harness_peak_bytes",
    )

    @property
    def harness_peak_bytes(self) -> int:
        a, b, c = HARNESS_FACTORS
        return int(a * self.params_bytes + b * self.inputs_bytes + c * self.outputs_bytes)

    def describe(self) -> str:
        return (
            f"inputs {_mb(self.inputs_bytes)}, outputs {_mb(self.outputs_bytes)}, parameters "
            f"{_mb(self.params_bytes)}; harness peak ~{_mb(self.harness_peak_bytes)}"
            + (f", {self.flops / 1e9:.3g} GFLOP per forward" if self.flops else "")
        )


def _mb(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / 2**30:.1f} GB"
    return f"{n / 2**20:.1f} MB"


def _tensor_bytes(xs: Any) -> int:
    import torch

    if isinstance(xs, torch.Tensor):
        return xs.numel() * xs.element_size()
    if isinstance(xs, (list, tuple)):
        return sum(_tensor_bytes(x) for x in xs)
    return 0


def estimate(problem: prob.Problem) -> Estimate | None:
    """Sizes of one forward, from the meta device (None when the problem cannot run there)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.device("meta"):
            model = problem.Model(*problem.get_init_inputs())
            xs = problem.get_inputs()
            params = (
                sum(_tensor_bytes(p) for p in model.parameters()) + sum(_tensor_bytes(b) for b in model.buffers())
                if isinstance(model, torch.nn.Module)
                else 0
            )
            counter = FlopCounterMode(display=False)
            with counter, torch.no_grad():
                out = model(*xs)
        return Estimate(
            int(params),
            _tensor_bytes(list(xs)),
            _tensor_bytes(prob.flatten_outputs(out)),
            int(counter.get_total_flops()),
        )
    except Exception:
        return None


@dataclass
class ScalePlan:
    overrides: dict[str, Any] = field(default_factory=dict)
    full: Estimate | None = None
    scaled: Estimate | None = None
    note: str = ""


def _fits(e: Estimate, budget_bytes: int, budget_flops: float) -> bool:
    return e.harness_peak_bytes <= budget_bytes and (e.flops or 0) <= budget_flops


def plan(path: Path, env: dict[str, str], budget_bytes: int, budget_flops: float) -> ScalePlan:
    """Overrides that make the problem fit the budget (none when it already fits)."""
    base = prob.load_problem(path, env)
    full = estimate(base)
    if full is None:
        return ScalePlan(note="no size estimate: the problem does not run on the meta device")
    if _fits(full, budget_bytes, budget_flops):
        return ScalePlan(full=full, scaled=full)
    values: dict[str, Any] = {}
    for name in prob.module_assignments(base.path):
        v = getattr(base.module, name, None)
        if isinstance(v, int) and not isinstance(v, bool) and v >= MIN_SCALABLE:
            values[name] = v
        elif (
            isinstance(v, tuple)
            and v
            and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
            and max(v) >= MIN_SCALABLE
        ):
            values[name] = v
    frozen: set[tuple[str, int]] = set()
    current = dict(values)
    best = full
    for _ in range(400):
        slots = [
            (v if not isinstance(v, tuple) else v[i], name, i)
            for name, v in current.items()
            for i in (range(len(v)) if isinstance(v, tuple) else [-1])
            if (name, i) not in frozen and (v if not isinstance(v, tuple) else v[i]) >= 2 * FLOOR
        ]
        if not slots:
            break
        top, name, i = max(slots)
        est, trial = None, None
        far = best.harness_peak_bytes > 4 * budget_bytes or (best.flops or 0) > 4 * budget_flops
        # far from the budget: halve every size within 2x of the largest at once (fewer re-estimates);
        # otherwise the largest; if the problem breaks, every size equal to it together (sizes that
        # must match, e.g. a batch broadcast against a feature dimension)
        groups = [[(n, j) for v, n, j in slots if 2 * v > top]] if far else []
        groups += [[(name, i)], [(n, j) for v, n, j in slots if v == top]]
        for group in groups:
            trial = dict(current)
            for n, j in group:
                trial[n] = _halve(trial[n], j)
            est = _estimate_with(path, env, {k: trial[k] for k in trial if trial[k] != values[k]})
            if est is not None:
                break
        if est is None:
            frozen.add((name, i))
            continue
        current, best = trial, est  # type: ignore[assignment]
        if _fits(est, budget_bytes, budget_flops):
            break
    overrides = {k: v for k, v in current.items() if v != values[k]}
    note = (
        "scaled to fit the CPU budget"
        if _fits(best, budget_bytes, budget_flops)
        else "scaled as far as its sizes allow (still above the CPU budget)"
    )
    return ScalePlan(overrides, full, best, note)


def _halve(v: Any, i: int) -> Any:
    if isinstance(v, tuple):
        return tuple(max(FLOOR, x // 2) if j == i else x for j, x in enumerate(v))
    return max(FLOOR, v // 2)


def _estimate_with(path: Path, env: dict[str, str], overrides: dict[str, Any]) -> Estimate | None:
    try:
        return estimate(prob.load_problem(path, env, overrides))
    except Exception:
        return None


def describe_overrides(full: dict[str, Any], overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k} {full.get(k)} -> {v}" for k, v in overrides.items())
