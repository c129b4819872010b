"""The `headroom validate` answer, computed from what a run saved: its run record (replacements,
check, the raw interleaved timings) and the base and variant traces.

`compute(run, base, variant)` is the only place the numbers are made, both right after a run
and offline (`headroom validate --from DIR`, `recompute(DIR)`), so a saved result can be
re-derived on any machine, and a new projection model re-scored against old measurements.

* measured: `timing.summarise` of the rounds (`headroom.measure`: the median of the rounds' paired ratios,
  its order-statistics interval, the median's noise).
* part: the kernels inside the replaced instances (`headroom.extract.part`), per step, in the
  base and the variant trace; its speedup is base_us / variant_us; launches per call are the
  part's kernels per step over the replaced modules' calls per step (a training call's
  backward kernels count with it).
* projected: the estimate is the a-priori one (`headroom.validate.apriori`: verify's result projected
  onto the base trace, what a user gets before integrating) with its calibrated interval
  (`headroom.projection.calibration`, level stated); without verify's result there is none.
  Diagnostics from the variant trace (`headroom.projection.project` on the base trace with the part's
  measured speedup, forward and backward separately, each with the variant's launches per call and
  host synchronisations): Amdahl, replay and `variant_estimate`.
* error of each projection: projected speedup / measured speedup - 1.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from headroom.errors import UserError
from headroom.extract.part import part_masks, part_time, trace_path
from headroom.jsonio import dumps, from_plain, plain
from headroom.projection.baseline import as_baseline
from headroom.projection.calls import find_calls
from headroom.projection.cpu import cpu_side, cpu_speed_ratio, untouched_ops
from headroom.projection.matching import select
from headroom.projection.overhead import solve_cpu_scale, unprofiled_step_us
from headroom.projection.problems import load_problems
from headroom.projection.project import project
from headroom.projection.selectors import parse_selector
from headroom.projection.speedups import Speedup
from headroom.validate.timing import summarise

RUN_FILE = "run.json"
RESULT_FILE = "result.json"
BASE_TRACE = "base.json.gz"
VARIANT_TRACE = "variant.json.gz"
LAUNCH_BOUND_IDLE = 0.5  # GPU idle at least half of the base trace's window: launch-bound
SOURCE = "headroom validate: measured in the variant trace"


# --- the result ------------------------------------------------------------------------------------------
# The `headroom validate --json` object (docs/validate.md), field by field in its key order: `plain` writes
# it, `from_plain` reads a saved one back. Numbers are None where the JSON has null (a ratio of nothing).


@dataclass
class Replacement:
    module: str
    candidate: str
    instances: int


@dataclass
class StepBaseline:
    step_ms: float | None  # the base model's measured step (median of its rounds)
    idle_fraction: float  # GPU idle in the base trace
    launch_bound: bool  # idle at least LAUNCH_BOUND_IDLE of the window


@dataclass
class Measured:
    """`timing.summarise` of the interleaved rounds (headroom.measure)."""

    speedup: float | None  # median of the rounds' paired ratios (block means)
    ci: list[float | None]  # its order-statistics interval
    coverage: float | None  # that interval's coverage (>= 0.95)
    noise: float | None  # the median's standard error, log scale
    method: str
    base_ms: float | None  # median block means
    variant_ms: float | None
    step_median_ms: list[float | None]  # each side's median step (base, variant)
    rounds: int
    stop: str  # tight | max_rounds | budget | fixed (a run saved before adaptive rounds)


@dataclass
class PartTimes:
    speedup: float | None  # base_us / variant_us
    base_us: float  # the part's kernel time per step in each trace
    variant_us: float
    launches_per_call: list[float | None]  # base, variant


@dataclass
class Projected:
    estimate: float | None  # the a-priori estimate (verify's result on the base trace); None without it
    low: float | None  # its calibrated interval at `level`, the measurement's noise included
    high: float | None
    level: float | None
    source: str | None  # the verify result it projects
    amdahl: float | None  # diagnostics, from the variant trace's part
    replay: float | None
    variant_estimate: float | None


@dataclass
class Errors:
    """Each projection's error: projected speedup / measured speedup - 1."""

    estimate: float | None
    amdahl: float | None
    replay: float | None
    variant_estimate: float | None


@dataclass
class BaseVariant:
    base: Any
    variant: Any


@dataclass
class Detail:
    trace_mode: str
    calls_per_step: float
    part_base: dict[str, Any]  # headroom.extract.part.PartTime of each trace
    part_variant: dict[str, Any]
    profiled_step_ms: BaseVariant
    estimate_method: str | None
    interval_method: str | None
    variant_envelope: list[float | None]  # the variant-based estimate's CPU-outcome bounds [low, high]
    part_syncs: float | None  # host synchronisations per replaced call in the variant trace
    part_cpu: dict[str, Any] | None
    projection_warnings: list[str]
    part_kernels: BaseVariant  # [name, calls, us] of the part's top kernels in each trace


@dataclass
class ValidateResult:
    """One validation: what was replaced, the measured end-to-end speedup, the part's, the projections made
    from the base trace alone and their errors (docs/validate.md)."""

    workload: str
    replacements: list[Replacement]
    baseline: StepBaseline
    measured: Measured
    part: PartTimes
    projected: Projected
    error: Errors
    config: dict[str, Any]
    check: dict[str, Any]
    detail: Detail

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ValidateResult:
        return from_plain(cls, d)


def paths_selector(paths: list[str]) -> str:
    """`module:` selector for the given instance paths (of the ranged module) and everything below them."""
    alts = "|".join(re.escape(trace_path(p)) for p in sorted(set(paths)))
    return f"module:^(?:{alts})(?:\\.|$)"


def _speedup_entry(
    selector: str, factor: float, launches: int | None, call_us: float | None = None, syncs: float | None = None
) -> Speedup:
    kw: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(Speedup)}
    if launches is not None and "launches" in fields:
        kw["launches"] = launches
        if call_us is not None and "call_us" in fields:
            kw["call_us"] = call_us
        if syncs and "syncs" in fields:
            kw["syncs"] = syncs
    return Speedup(parse_selector(selector), factor, None, SOURCE, **kw)


def _syncs_per_call(side: Any, calls: list) -> float:
    """Blocking runtime calls (host synchronisations) inside the calls' ranges on their threads, per call."""
    blk = side.blocking
    if not calls or blk is None or not len(blk):
        return 0.0
    n = 0
    for c in calls:
        on = blk[(blk["pid"].astype(str) == str(c.pid)) & (blk["tid"].astype(str) == str(c.tid))]
        n += int(((on["ts"] >= c.start) & (on["ts"] <= c.end)).sum())
    return n / len(calls)


def part_cpu(base: Any, variant: Any, selector: str) -> dict[str, Any] | None:
    """The replaced calls' CPU time and host synchronisations, from both traces (GPU traces only; None elsewhere).

    Per call (profiled us, the mean over the calls that do not block): the base footprint and the variant's;
    the variant profile's CPU speed relative to the base's, from the ops neither variant changes
    (`cpu_speed_ratio`: two profiles taken one after the other can run at different CPU speeds); and
    `call_us`, the variant's call on the unprofiled clock: ``variant / ratio x cpu_scale`` (the base
    trace's profiler-overhead correction). It is what the forward entry's ``call_us`` says. `syncs`: the
    variant's blocking runtime calls per replaced call (the entry's ``syncs``: the projection's host-sync
    model, as verify's count feeds the a-priori path); a call that blocks has no ``call_us`` of its own."""
    if base.mode != "gpu" or variant.mode != "gpu":
        return None
    problems = load_problems()
    sel = parse_selector(selector)
    found = []
    for a in (base, variant):
        b = as_baseline(a)
        side = cpu_side(b)
        calls, _ = find_calls(b, side, sel, select(b.events, sel, problems), problems)
        calls = [c for c in calls if len(c.events)]
        free = [c for c in calls if not c.blocked]
        found.append((b, free, untouched_ops(b, side, free), _syncs_per_call(side, calls)))
    (bb, cb, ob, _), (_, cv, ov, syncs) = found
    if not cb:
        return None
    target, src = unprofiled_step_us(bb)
    scale = solve_cpu_scale(bb, target, src).cpu_scale if target is not None else 1.0
    base_us = float(np.mean([c.footprint_us for c in cb]))
    out = {
        "base_call_us": base_us,
        "variant_call_us": None,
        "calls": [len(cb), len(cv)],
        "cpu_speed_ratio": None,
        "ratio_ops": None,
        "cpu_scale": scale,
        "call_us": None,
        "syncs": syncs,
    }
    if cv:
        ratio, names, ops = cpu_speed_ratio(ob, ov)
        var_us = float(np.mean([c.footprint_us for c in cv]))
        out.update(
            variant_call_us=var_us,
            cpu_speed_ratio=ratio,
            ratio_ops=[names, ops],
            call_us=var_us / ratio * scale if ratio > 0 else None,
        )
    return out


def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return math.inf if a > 0 else 1.0


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def top_kernels(a: Any, paths: list[str], n: int = 8) -> list[list[Any]]:
    """The part's kernels (or CPU ops) with the most time: [name, count per step, us per step]."""
    mask = part_masks(a, paths)["all"]
    ev = a.events[mask]
    if not len(ev):
        return []
    g = ev.groupby("name")["dur"].agg(["count", "sum"]).sort_values("sum", ascending=False).head(n)
    steps = max(int(a.num_steps), 1)
    return [[str(k), float(r["count"]) / steps, float(r["sum"]) / steps] for k, r in g.iterrows()]


def _estimate(res: Any) -> dict[str, Any] | None:
    est = getattr(res, "estimate", None)
    if est is None:
        return None
    if not isinstance(est, dict):
        est = {k: getattr(est, k, None) for k in ("speedup", "low", "high", "method")}
    return est


def _unprofiled(p: Any) -> float | None:
    """A projection's end-to-end speedup on the unprofiled clock where the trace knows it (the clock the
    interleaved measurement runs on, as `headroom.predict` reports it), else on the profiled one."""
    if p is None:
        return None
    u = p.unprofiled
    return float(u.speedup) if u else p.speedup


def projections(
    base: Any, paths: list[str], calls_per_step: float, pb: Any, pv: Any, variant: Any = None
) -> dict[str, Any]:
    """Amdahl, replay and the estimate from the base trace with the part's measured speedups (and, given
    the variant trace, the CPU time of its calls: `part_cpu`)."""
    sel = paths_selector(paths)
    cpu = part_cpu(base, variant, f"{sel} & phase:forward") if variant is not None and pb.forward_us > 0 else None
    entries = []
    for phase, b_us, v_us, v_k in (
        ("forward", pb.forward_us, pv.forward_us, pv.forward_kernels),
        ("backward", pb.backward_us, pv.backward_us, pv.backward_kernels),
    ):
        if b_us <= 0:
            continue
        factor = _ratio(b_us, v_us)
        if not math.isfinite(factor):
            factor = 1e9  # the variant runs no kernel here: the part takes (practically) no time
        # A call is one module range instance on the launching thread: the forward's. Backward kernels run
        # on autograd's thread outside every range, so the backward entry leaves launches unchanged.
        launches = round(v_k / calls_per_step) if phase == "forward" and calls_per_step > 0 else None
        fwd = cpu if cpu and phase == "forward" else {}
        entries.append(_speedup_entry(f"{sel} & phase:{phase}", factor, launches, fwd.get("call_us"), fwd.get("syncs")))
    if not entries:
        return {
            "amdahl": 1.0,
            "replay": 1.0 if base.mode == "gpu" else None,
            "estimate": None,
            "low": None,
            "high": None,
            "method": None,
            "cpu": None,
            "warnings": ["the part has no kernels in the base trace"],
        }
    res = project(base, entries)
    amdahl = res.get("amdahl")
    replay = res.get("replay")
    est = _estimate(res)
    return {
        "amdahl": _unprofiled(amdahl),
        "replay": _unprofiled(replay),
        "estimate": est.get("speedup") if est else None,
        "low": est.get("low") if est else None,
        "high": est.get("high") if est else None,
        "method": est.get("method") if est else None,
        "cpu": cpu,
        "warnings": list(res.warnings),
    }


def apriori(
    base: Any, inputs: tuple[Path | None, Path | None] | None, noise: float | None, where: Path | None = None
) -> dict[str, Any]:
    """The a-priori estimate (`headroom.validate.apriori`) and its calibrated interval for a measurement with
    log-scale noise `noise`; nothing without verify's result."""
    none: dict[str, Any] = {
        "estimate": None,
        "low": None,
        "high": None,
        "level": None,
        "source": None,
        "method": None,
        "interval_method": None,
        "warnings": [],
    }
    if not inputs or inputs[0] is None:
        return dict(
            none,
            warnings=[
                "no a-priori estimate: give verify's result of the candidate on the extracted "
                "problem (--speedups verify.json --problems ENTRY.toml)"
            ],
        )
    from headroom.projection.calibration import shipped_calibration
    from headroom.validate.apriori import apriori_projection

    verify, problems = inputs
    if verify is None:  # (checked above: narrowed for the type checker)
        return dict(none)
    try:
        _, res = apriori_projection(base, verify, problems)
    except UserError as e:  # e.g. verify was inconclusive: no speedup to project
        return dict(none, warnings=[f"no a-priori estimate from {verify.name}: {e}"])
    est = res.estimate
    if est is None or not math.isfinite(est.speedup):
        return dict(none, warnings=[f"{verify}: the a-priori projection has no estimate", *res.warnings])
    cal = shipped_calibration()
    lo, hi = cal.interval(float(est.speedup), noise or 0.0)
    try:
        source = str(Path(verify).resolve().relative_to(where.resolve())) if where is not None else str(verify)
    except ValueError:
        source = str(verify)
    return {
        "estimate": float(est.speedup),
        "low": lo,
        "high": hi,
        "level": cal.level,
        "source": source,
        "method": est.method,
        "interval_method": cal.method,
        "warnings": list(res.warnings),
    }


def compute(
    run: dict[str, Any],
    base: Any,
    variant: Any,
    inputs: tuple[Path | None, Path | None] | None = None,
    where: Path | None = None,
) -> ValidateResult:
    """The result (docs/validate.md) from a run record, the two analysed traces and, for the estimate,
    verify's result and the problem's entry (`inputs`; `where`: the run directory they are named from)."""
    reps = run["replacements"]
    paths = [p for r in reps for p in r["paths"]]
    calls = float(sum(r["calls_per_step"] for r in reps))
    m = summarise(run["timing"])
    pb, pv = part_time(base, paths), part_time(variant, paths)
    base_us, var_us = pb.us, pv.us
    proj = projections(base, paths, calls, pb, pv, variant)
    ap = apriori(base, inputs, m["noise"], where)

    def err(x: float | None) -> float | None:
        return _finite(x / m["speedup"] - 1.0) if x is not None and m["speedup"] else None

    idle = float(base.idle_fraction)
    cpu = proj["cpu"]
    return ValidateResult(
        workload=run["workload"],
        replacements=[Replacement(r["module"], r["candidate"], r["instances"]) for r in reps],
        baseline=StepBaseline(m["base_ms"], idle, bool(base.mode == "gpu" and idle >= LAUNCH_BOUND_IDLE)),
        measured=Measured(**m),
        part=PartTimes(
            _finite(_ratio(base_us, var_us)),
            base_us,
            var_us,
            [pb.kernels / calls if calls else None, pv.kernels / calls if calls else None],
        ),
        projected=Projected(
            ap["estimate"],
            ap["low"],
            ap["high"],
            ap["level"],
            ap["source"],
            proj["amdahl"],
            proj["replay"],
            proj["estimate"],
        ),
        error=Errors(err(ap["estimate"]), err(proj["amdahl"]), err(proj["replay"]), err(proj["estimate"])),
        config=run.get("config", {}),
        check=run.get("check", {}),
        detail=Detail(
            trace_mode=base.mode,
            calls_per_step=calls,
            part_base=plain(pb),
            part_variant=plain(pv),
            profiled_step_ms=BaseVariant(base.step_us / 1e3, variant.step_us / 1e3),
            estimate_method=ap["method"],
            interval_method=ap["interval_method"],
            variant_envelope=[proj["low"], proj["high"]],
            part_syncs=cpu.get("syncs") if cpu else None,
            part_cpu=cpu,
            projection_warnings=ap["warnings"] + proj["warnings"],
            part_kernels=BaseVariant(top_kernels(base, paths), top_kernels(variant, paths)),
        ),
    )


def recompute(directory: str | Path) -> ValidateResult:
    """The result of a saved run, recomputed from its run record and traces (nothing is re-run)."""
    from headroom.trace.analysis import analyze

    d = Path(directory)
    run_path = d / RUN_FILE
    if not d.is_dir():
        raise UserError(f"--from {d}: not a directory")
    missing = [n for n in (RUN_FILE, BASE_TRACE, VARIANT_TRACE) if not (d / n).is_file()]
    if missing:
        raise UserError(f"--from {d}: not a saved validate run (missing {', '.join(missing)})")
    try:
        run = json.loads(run_path.read_text())
    except ValueError as e:
        raise UserError(f"{run_path}: invalid JSON ({e})") from None
    from headroom.validate.apriori import find_inputs

    return saved_form(compute(run, analyze(d / BASE_TRACE), analyze(d / VARIANT_TRACE), find_inputs(d), d))


def saved_form(result: ValidateResult) -> ValidateResult:
    """The result as its JSON file holds it (non-finite numbers as None, tuples as lists): what reading it
    back gives, so a fresh result and a saved one compare equal."""
    return ValidateResult.from_dict(json.loads(dumps(result)))
