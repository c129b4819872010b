"""End-to-end projections: what a real model gains when selected kernels get faster.

Two methods, always reported side by side (docs/projection.md):

* **Amdahl** -- ``T' = T - sum_i t_i (1 - 1/s_i)`` over the selected events,
  where ``T`` is the measured window (``Analysis.wall_us``) and ``t_i`` an
  event's share of busy time (``wall_us``: overlapping streams split each
  instant, so nothing is counted twice). Idle and launch time stay fixed.
  With several devices each device saves its own time and ``T'`` is the slowest.
* **Timeline replay** -- the trace's GPU streams are re-run with the selected
  kernels shortened (``dur / s``). Each event starts at the latest of: its CPU
  launch plus a launch latency, the end of the previous event on its stream plus
  the measured gap, and (where the trace records ``cuda_sync`` events) the end of
  the event it waits on in another stream. CPU launch times stay fixed except
  after a blocking synchronisation (``cudaDeviceSynchronize``,
  ``cudaStreamSynchronize``, ``cudaEventSynchronize``, synchronous
  ``cudaMemcpy``, ``cudaFree``): when the GPU work it waited for ends earlier,
  the call returns earlier and all later CPU activity of that process moves by
  the same amount. A replay with no change reproduces the measured timeline.

With speedup entries that say how many kernels each call launches after the change (``launches``),
the replay also changes the CPU timeline (:mod:`headroom.projection.cpu`): each replaced call's CPU
footprint becomes the cost of its new launches, later CPU work of that process moves earlier until a
blocking call waits for the GPU, and the call's kernels run as the new kernels. Where the unprofiled
step is known (the manifest, or ``step_ms``) the replay's CPU clock is scaled to reproduce it
(:mod:`headroom.projection.overhead`), and the result leads with an estimate and its interval
(:mod:`headroom.projection.estimate`).

Both also give the bounds: the gain if the selected kernels took zero time, and
for a distribution of speedups (a benchmark's results) the projection at
win rate x median speedup, at quantiles and at the harmonic-mean expectation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.jsonio import member, plain
from headroom.projection.amdahl import Projection, amdahl
from headroom.projection.baseline import Baseline, Breakdown, as_baseline, baseline_breakdown
from headroom.projection.cpu import CallChange
from headroom.projection.distributions import Distribution
from headroom.projection.entry_calls import apply_entries
from headroom.projection.estimate import BOUNDS, Drift, Estimate, load_drift, scenario_estimate
from headroom.projection.matching import EntryResult, select
from headroom.projection.overhead import Unprofiled, solve_cpu_scale, unprofiled_step_us
from headroom.projection.problems import ProblemMap, load_problems
from headroom.projection.replay import replay, replay_check, replay_projection
from headroom.projection.scenarios import DEFAULT_QUANTILES, distribution_scenarios
from headroom.projection.selectors import Selector, parse_selector
from headroom.projection.speedups import Speedup, parse_call_us, parse_factor, parse_launches
from headroom.projection.streams import baseline_waits
from headroom.trace.analysis import Analysis

PROFILER_OVERHEAD_WARN = 0.10  # warn when profiled steps are this much slower than unprofiled ones


@dataclass
class ProjectResult:
    source: str
    mode: str
    baseline_us: float
    per_step_us: float
    num_steps: int
    n_devices: int
    baseline: Breakdown
    selected_us: float
    selected_wall_us: float
    entries: list[EntryResult]
    warnings: list[str]
    projections: list[Projection]
    replay_check: dict[str, float] | None = None
    distribution: dict[str, Any] | None = None
    scenario_selector: str | None = None
    estimate: Estimate | None = None  # the first scenario's best estimate and interval
    unprofiled: Unprofiled | None = None  # the unprofiled step and the CPU clock that reproduces it

    # The ``headroom project --json`` contract.
    JSON_KEYS: ClassVar[tuple[str | tuple[str, str], ...]] = (
        ("trace", "source"),
        "mode",
        "baseline_us",
        "per_step_us",
        "num_steps",
        "n_devices",
        "baseline",
        "selected_us",
        "selected_wall_us",
        "entries",
        "warnings",
        "scenario_selector",
        "distribution",
        "estimate",
        "unprofiled",
        "projections",
        "replay_check",
    )

    def get(self, method: str, scenario: str = "speedups") -> Projection | None:
        for p in self.projections:
            if p.method == method and p.scenario == scenario:
                return p
        return None

    def to_frame(self) -> pd.DataFrame:
        """One row per projection: scenario, method, factor, measured and projected ms per step, the
        end-to-end gain and speedup, and how the projected window divides."""
        rows = []
        for p in self.projections:
            bd = plain(p.breakdown)
            u = p.unprofiled
            rows.append(
                {
                    "scenario": p.scenario,
                    "method": p.method,
                    "factor": p.factor,
                    "measured_ms_per_step": self.per_step_us / 1e3,
                    "projected_ms_per_step": p.per_step_us / 1e3,
                    "gain": p.gain,
                    "speedup": p.speedup,
                    "unprofiled_projected_ms_per_step": u.per_step_us / 1e3 if u else float("nan"),
                    "unprofiled_speedup": u.speedup if u else float("nan"),
                    "kernel_fraction": bd["kernel_fraction"],
                    "memory_communication_fraction": bd["memory_fraction"] + bd["communication_fraction"],
                    "idle_fraction": bd["idle_fraction"],
                }
            )
        return pd.DataFrame(
            rows,
            columns=[
                "scenario",
                "method",
                "factor",
                "measured_ms_per_step",
                "projected_ms_per_step",
                "gain",
                "speedup",
                "unprofiled_projected_ms_per_step",
                "unprofiled_speedup",
                "kernel_fraction",
                "memory_communication_fraction",
                "idle_fraction",
            ],
        )


def project(
    analysis: Analysis | Baseline,
    entries: Sequence[Speedup] = (),
    distribution: Distribution | None = None,
    win_rate: float | None = None,
    median: float | None = None,
    scenario_select: str = "category:addressable",
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    strict: bool = False,
    problems: ProblemMap | None = None,
    methods: Sequence[str] = ("amdahl", "replay"),
    extra_warnings: Sequence[str] = (),
    step_ms: float | None = None,
    drift: Drift | None = None,
) -> ProjectResult:
    """Both projections for speedup entries, the zero-time bound, and distribution scenarios; the first
    scenario's estimate with its interval. `step_ms`: the unprofiled step time (default: the manifest's)."""
    b = as_baseline(analysis)
    problems = problems or load_problems()
    drift = drift or load_drift()
    warnings = list(extra_warnings)
    use_replay = _can_replay(b, methods, warnings)
    scenarios = distribution_scenarios(distribution, win_rate, median, quantiles)
    if not entries and not scenarios:
        raise UserError(
            "nothing to project: give --speedup SELECTOR=FACTOR, --speedups FILE, "
            "--distribution FILE or --win-rate/--median"
        )
    unprof, amdahl_base_u, cpu_ratio = _unprofiled_clock(b, step_ms, use_replay, warnings)
    pj = _Projector(b, methods, use_replay, amdahl_base_u, cpu_ratio, unprof)
    changes: dict[str, list[CallChange]] = {bound: [] for bound in BOUNDS}

    cpu_calls: tuple[float, float] | None = None  # cpu-ops: (inclusive CPU time of the calls, time saved)
    entry_results: list[EntryResult] = []
    sel_us = sel_wall = 0.0
    if entries:
        res, entry_results, cpu_calls, unprof = apply_entries(b, entries, problems, strict, unprof, warnings, changes)
        pj.unprof = unprof
        sel_us, sel_wall = _selected(b, res.selected)
        pj.add(res.factors, None, "speedups", chs=changes["estimate"])
        pj.add(np.inf, res.selected, "zero_time", "the selected kernels take no time")
    dist_info = None
    if scenarios:
        smask = select(b.events, parse_selector(scenario_select), problems)
        if not smask.any():
            warnings.append(f"{scenario_select} matches no kernel in this trace: distribution scenarios gain nothing")
        if not entries:
            sel_us, sel_wall = _selected(b, smask)
            pj.add(np.inf, smask, "zero_time", f"{scenario_select} takes no time")
        for sc in scenarios:
            pj.add(sc.factor, smask, sc.name, sc.note)
        dist_info = _distribution_info(b, smask, scenario_select, scenarios, distribution, win_rate, median)
    projections = pj.projections
    _check_finite(b, projections)
    check = _replay_check(b, unprof, warnings) if use_replay else None
    first = next((p.scenario for p in projections if p.scenario != "zero_time"), None)
    est = pj.estimate(first, changes, drift, cpu_calls) if first is not None else None
    return ProjectResult(
        source=b.source,
        mode=b.mode,
        baseline_us=b.wall_us,
        per_step_us=b.per_step_us,
        num_steps=b.num_steps,
        n_devices=b.n_devices,
        baseline=baseline_breakdown(b),
        selected_us=sel_us,
        selected_wall_us=sel_wall,
        entries=entry_results,
        warnings=warnings,
        projections=projections,
        replay_check=check,
        distribution=dist_info,
        scenario_selector=scenario_select if scenarios else None,
        estimate=est,
        unprofiled=unprof,
    )


def _can_replay(b: Baseline, methods: Sequence[str], warnings: list[str]) -> bool:
    """Whether the replay was asked for and the trace has the GPU events it replays (else a warning says so)."""
    if "replay" not in methods:
        return False
    if b.mode != "gpu":
        warnings.append(
            "replay needs GPU events; this trace has none (cpu-ops mode): Amdahl, and an estimate from "
            "the CPU time of the calls the entries name"
        )
        return False
    return True


def _unprofiled_clock(
    b: Baseline, step_ms: float | None, use_replay: bool, warnings: list[str]
) -> tuple[Unprofiled | None, float | None, float]:
    """Where the unprofiled step is known: the replay's CPU clock that reproduces it, the unprofiled window
    Amdahl starts from, and the ratio CPU-only traces' op time shrinks by with the clock."""
    target_us, target_src = unprofiled_step_us(b, step_ms)
    unprof: Unprofiled | None = None
    if target_us is not None and use_replay:
        unprof = solve_cpu_scale(b, target_us, target_src)
        if unprof.note and not unprof.reached:
            warnings.append(f"profiler-overhead correction: {unprof.note}")
    # Amdahl on the unprofiled clock: the unprofiled window less the GPU time saved (CPU-only traces:
    # their op time shrinks with the clock).
    amdahl_base_u = target_us * max(b.num_steps, 1) if target_us is not None else None
    cpu_ratio = (amdahl_base_u / b.wall_us) if (amdahl_base_u and b.mode != "gpu" and b.wall_us > 0) else 1.0
    return unprof, amdahl_base_u, cpu_ratio


def _selected(b: Baseline, mask: np.ndarray) -> tuple[float, float]:
    """The selected events' time and their share of busy time."""
    return float(b.events["dur"].to_numpy()[mask].sum()), float(b.events["wall_us"].to_numpy()[mask].sum())


def _check_finite(b: Baseline, projections: list[Projection]) -> None:
    for p in projections:
        if not np.isfinite(p.projected_us):
            raise UserError(
                f"{b.source}: the {p.method} projection of {p.scenario} overflows (a speedup factor too close to zero)"
            )


def _replay_check(b: Baseline, unprof: Unprofiled | None, warnings: list[str]) -> dict[str, Any] | None:
    """The replay without changes against the measured window; what the trace leaves uncertain, as warnings."""
    warnings.extend(_replay_warnings(b, unprof))
    check = replay_check(b)
    if check is not None and abs(check["window_error_us"]) > max(1e-6 * b.wall_us, 1.0):
        warnings.append(f"replay without changes is {check['window_error_us']:.1f} us off the measured window")
    return check


class _Projector:
    """Each scenario's projections by the methods asked (Amdahl, replay), on the profiled clock and, where the
    unprofiled step is known, on the unprofiled one; and each scenario's per-event factors (the estimate's)."""

    def __init__(
        self,
        b: Baseline,
        methods: Sequence[str],
        use_replay: bool,
        amdahl_base_u: float | None,
        cpu_ratio: float,
        unprof: Unprofiled | None,
    ) -> None:
        self.b, self.methods, self.use_replay = b, methods, use_replay
        self.amdahl_base_u, self.cpu_ratio = amdahl_base_u, cpu_ratio
        self.unprof = unprof  # the CPU clock that reproduces the unprofiled step (measured calls may replace it)
        self.projections: list[Projection] = []
        self.scenario_factors: dict[str, np.ndarray] = {}

    def add(
        self,
        f: np.ndarray | float,
        mask: np.ndarray | None,
        scenario: str,
        note: str = "",
        chs: Sequence[CallChange] = (),
    ) -> None:
        b = self.b
        full = f if isinstance(f, np.ndarray) else _uniform(len(b.events), f, mask)
        self.scenario_factors.setdefault(scenario, full)
        for method in ("amdahl", "replay"):
            if method not in self.methods or (method == "replay" and not self.use_replay):
                continue
            if method == "amdahl":
                p = amdahl(b, full, None, scenario)
                if self.amdahl_base_u is not None:
                    p.unprofiled_baseline_us = self.amdahl_base_u
                    p.unprofiled_projected_us = self.amdahl_base_u - p.saved_us * self.cpu_ratio
            else:
                p = replay_projection(b, full, None, scenario, changes=chs)
                unprof = self.unprof
                if unprof is not None:
                    p.unprofiled_baseline_us = unprof.baseline_us
                    p.unprofiled_projected_us = (
                        replay(b, full, changes=chs, cpu_scale=unprof.cpu_scale).projected_us * unprof.window_scale
                    )
            p.note = note
            if not isinstance(f, np.ndarray):
                p.factor = float(f)
            self.projections.append(p)

    def estimate(
        self,
        scenario: str,
        changes: dict[str, list[CallChange]],
        drift: Drift,
        cpu_calls: tuple[float, float] | None,
    ) -> Estimate:
        """The scenario's estimate with its interval (the replaced calls' changes and CPU time are the speedup
        entries', scenario "speedups")."""
        speedups = scenario == "speedups"
        return scenario_estimate(
            self.b,
            self.scenario_factors[scenario],
            changes if speedups else {},
            self.unprof,
            drift,
            scenario,
            self.use_replay,
            self.projections,
            self.amdahl_base_u,
            cpu_calls if speedups else None,
        )


def _distribution_info(
    b: Baseline,
    smask: np.ndarray,
    scenario_select: str,
    scenarios: Sequence,
    distribution: Distribution | None,
    win_rate: float | None,
    median: float | None,
) -> dict[str, Any]:
    info: dict[str, Any] = {
        "select": scenario_select,
        "selected_us": float(b.events["dur"].to_numpy()[smask].sum()),
        "selected_wall_us": float(b.events["wall_us"].to_numpy()[smask].sum()),
        "scenarios": [{"scenario": s.name, "factor": s.factor, "note": s.note} for s in scenarios],
    }
    if distribution is not None:
        info.update(
            {
                "source": distribution.source,
                "n": distribution.n,
                "win_rate": distribution.win_rate,
                "median_win": distribution.median_win,
            }
        )
    if win_rate is not None:
        info["win_rate"] = win_rate
    if median is not None:
        info["median_win"] = median
    return info


def _replay_warnings(b: Baseline, unprof: Unprofiled | None) -> list[str]:
    """What the trace itself leaves uncertain in a replay: profiler overhead no unprofiled step corrects, and
    stream waits that name no producer or could not be placed."""
    out = []
    timing = member(b.manifest, "timing")
    overhead = timing.get("overhead")
    if unprof is None and isinstance(overhead, (int, float)) and overhead > PROFILER_OVERHEAD_WARN:
        out.append(
            f"the profiled steps ran {100 * overhead:.0f}% slower than unprofiled ones "
            f"({timing.get('step_ms', float('nan')):.2f} ms/step): the trace's CPU timeline carries profiler "
            f"overhead, so the replay may understate gains where launches are the bottleneck"
        )
    waits = baseline_waits(b)
    if waits.inferred:
        out.append(
            f"{waits.inferred} stream wait(s) name no cudaEventRecord (CUDA >= 12.9 traces: "
            f"pytorch/pytorch#195068); each producer was taken from the waiting thread's last "
            f"cudaEventRecord and the stream it last launched to"
        )
    if waits.unresolved:
        out.append(
            f"{waits.unresolved} stream wait(s) could not be placed; the replay holds their "
            f"consumers' measured lag instead"
        )
    return out


def _uniform(n: int, f: float, mask: np.ndarray | None) -> np.ndarray:
    out = np.ones(n)
    out[mask if mask is not None else slice(None)] = float(f)
    return out


@dataclass
class Prediction:
    """What the base trace alone predicts for one replaced part: the numbers `headroom validate` checks."""

    amdahl: float
    replay: float | None
    estimate: float
    low: float
    high: float
    method: str
    result: ProjectResult

    # ``validate --json``'s "projected" object.
    JSON_KEYS: ClassVar[tuple[str, ...]] = ("amdahl", "replay", "estimate", "low", "high", "method")


def predict(
    analysis: Analysis | Baseline,
    part: str | Selector,
    speedup: float,
    launches: int | None = None,
    step_ms: float | None = None,
    problems: ProblemMap | None = None,
    call_us: float | None = None,
) -> Prediction:
    """Amdahl, replay and the estimate with its interval for one replaced part, from the base trace alone.

    `part`: the replaced part (a selector, e.g. ``module:LlamaRMSNorm``); `speedup`: its measured
    kernel-time speedup; `launches`: kernels each call launches after the change (None: unchanged);
    `step_ms`: the unprofiled base step (default: the trace's manifest); `call_us`: the measured CPU time
    of one call after the change (unprofiled us; None: the trace's single-launch op per launch). Speedups are end-to-end
    (base time / changed time); the estimate is on the unprofiled clock when the step is known.
    """
    sel = parse_selector(part) if isinstance(part, str) else part
    n = parse_launches(launches, f"predict {sel}")
    entry = Speedup(
        sel,
        parse_factor(speedup, f"predict {sel}"),
        source="predict",
        launches=n,
        call_us=parse_call_us(call_us, f"predict {sel}", n),
    )
    res = project(analysis, [entry], problems=problems, step_ms=step_ms)
    am, rp, e = res.get("amdahl"), res.get("replay"), res.estimate
    if am is None or e is None:  # project always makes both for an entry; this guards a broken invariant
        raise RuntimeError("project() returned no Amdahl projection or estimate")

    def unprof(p: Projection) -> float:
        u = p.unprofiled
        return float(u.speedup) if u else p.speedup

    return Prediction(unprof(am), unprof(rp) if rp is not None else None, e.speedup, e.low, e.high, e.method, res)
