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

Both also give the bounds: the gain if the selected kernels took zero time, and
for a distribution of speedups (a benchmark's results) the projection at
win rate x median speedup, at quantiles and at the harmonic-mean expectation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

import numpy as np

from headroom.errors import UserError
from headroom.projection.amdahl import Projection, amdahl
from headroom.projection.baseline import Baseline, Breakdown, as_baseline, baseline_breakdown
from headroom.projection.distributions import Distribution
from headroom.projection.matching import Resolution, resolve, select
from headroom.projection.problems import ProblemMap, load_problems
from headroom.projection.replay import replay_check, replay_projection
from headroom.projection.scenarios import DEFAULT_QUANTILES, distribution_scenarios
from headroom.projection.selectors import parse_selector
from headroom.projection.speedups import Speedup
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
    entries: list[dict]
    warnings: list[str]
    projections: list[Projection]
    replay_check: dict[str, float] | None = None
    distribution: dict[str, Any] | None = None
    scenario_selector: str | None = None

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
            bd = p.breakdown.to_dict()
            rows.append({"scenario": p.scenario, "method": p.method, "factor": p.factor,
                         "measured_ms_per_step": self.per_step_us / 1e3, "projected_ms_per_step": p.per_step_us / 1e3,
                         "gain": p.gain, "speedup": p.speedup, "kernel_fraction": bd["kernel_fraction"],
                         "memory_communication_fraction": bd["memory_fraction"] + bd["communication_fraction"],
                         "idle_fraction": bd["idle_fraction"]})
        return pd.DataFrame(rows, columns=["scenario", "method", "factor", "measured_ms_per_step",
                                           "projected_ms_per_step", "gain", "speedup", "kernel_fraction",
                                           "memory_communication_fraction", "idle_fraction"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "trace": self.source, "mode": self.mode,
            "baseline_us": self.baseline_us, "per_step_us": self.per_step_us, "num_steps": self.num_steps,
            "n_devices": self.n_devices, "baseline": self.baseline.to_dict(),
            "selected_us": self.selected_us, "selected_wall_us": self.selected_wall_us,
            "entries": self.entries, "warnings": self.warnings,
            "scenario_selector": self.scenario_selector, "distribution": self.distribution,
            "projections": [p.to_dict() for p in self.projections],
            "replay_check": self.replay_check,
        }


def project(analysis: Analysis | Baseline, entries: Sequence[Speedup] = (), distribution: Distribution | None = None,
            win_rate: float | None = None, median: float | None = None,
            scenario_select: str = "category:addressable", quantiles: Sequence[float] = DEFAULT_QUANTILES,
            strict: bool = False, problems: ProblemMap | None = None, methods: Sequence[str] = ("amdahl", "replay"),
            extra_warnings: Sequence[str] = ()) -> ProjectResult:
    """Both projections for speedup entries, the zero-time bound, and distribution scenarios."""
    b = as_baseline(analysis)
    problems = problems or load_problems()
    warnings = list(extra_warnings)
    use_replay = "replay" in methods
    if use_replay and b.mode != "gpu":
        warnings.append("replay needs GPU events; this trace has none (cpu-ops mode): Amdahl only")
        use_replay = False
    scenarios = distribution_scenarios(distribution, win_rate, median, quantiles)
    if not entries and not scenarios:
        raise UserError("nothing to project: give --speedup SELECTOR=FACTOR, --speedups FILE, "
                        "--distribution FILE or --win-rate/--median")

    projections: list[Projection] = []

    def both(f: np.ndarray | float, mask: np.ndarray | None, scenario: str, note: str = "") -> None:
        for method, fn in (("amdahl", amdahl), ("replay", replay_projection)):
            if method not in methods or (method == "replay" and not use_replay):
                continue
            p = fn(b, f, mask, scenario)
            p.note = note
            if not isinstance(f, np.ndarray):
                p.factor = float(f)
            projections.append(p)

    res: Resolution | None = None
    sel_us = sel_wall = 0.0
    if entries:
        res = resolve(list(entries), b.events, problems, strict=strict)
        warnings.extend(res.warnings)
        mask = res.selected
        sel_us = float(b.events["dur"].to_numpy()[mask].sum())
        sel_wall = float(b.events["wall_us"].to_numpy()[mask].sum())
        both(res.factors, None, "speedups")
        both(np.inf, mask, "zero_time", "the selected kernels take no time")
    dist_info = None
    if scenarios:
        smask = select(b.events, parse_selector(scenario_select), problems)
        if not smask.any():
            warnings.append(f"{scenario_select} matches no kernel in this trace: distribution scenarios gain nothing")
        if not entries:
            sel_us = float(b.events["dur"].to_numpy()[smask].sum())
            sel_wall = float(b.events["wall_us"].to_numpy()[smask].sum())
            both(np.inf, smask, "zero_time", f"{scenario_select} takes no time")
        for sc in scenarios:
            both(sc.factor, smask, sc.name, sc.note)
        dist_info = {"select": scenario_select,
                     "selected_us": float(b.events["dur"].to_numpy()[smask].sum()),
                     "selected_wall_us": float(b.events["wall_us"].to_numpy()[smask].sum()),
                     "scenarios": [{"scenario": s.name, "factor": s.factor, "note": s.note} for s in scenarios]}
        if distribution is not None:
            dist_info.update({"source": distribution.source, "n": distribution.n,
                              "win_rate": distribution.win_rate, "median_win": distribution.median_win})
        if win_rate is not None:
            dist_info["win_rate"] = win_rate
        if median is not None:
            dist_info["median_win"] = median
    timing = b.manifest.get("timing") if isinstance(b.manifest.get("timing"), dict) else {}
    overhead = timing.get("overhead")
    if use_replay and isinstance(overhead, (int, float)) and overhead > PROFILER_OVERHEAD_WARN:
        warnings.append(
            f"the profiled steps ran {100 * overhead:.0f}% slower than unprofiled ones "
            f"({timing.get('step_ms', float('nan')):.2f} ms/step): the trace's CPU timeline carries profiler "
            f"overhead, so the replay may understate gains where launches are the bottleneck")
    check = replay_check(b) if use_replay else None
    if check is not None and abs(check["window_error_us"]) > max(1e-6 * b.wall_us, 1.0):
        warnings.append(f"replay without changes is {check['window_error_us']:.1f} us off the measured window")
    return ProjectResult(
        source=b.source, mode=b.mode, baseline_us=b.wall_us, per_step_us=b.per_step_us,
        num_steps=b.num_steps, n_devices=b.n_devices, baseline=baseline_breakdown(b),
        selected_us=sel_us, selected_wall_us=sel_wall, entries=res.to_dict() if res else [],
        warnings=warnings, projections=projections, replay_check=check, distribution=dist_info,
        scenario_selector=scenario_select if scenarios else None)
