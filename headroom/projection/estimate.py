"""The estimate `headroom project` leads with: the replay with the CPU model on the unprofiled clock,
and the interval a measurement should fall inside.

* ``speedup``: the replay with the replaced calls' CPU work changed (each new launch costs a
  single-launch op of its thread, :mod:`headroom.projection.cpu`), on the CPU clock that reproduces the
  unprofiled step (:mod:`headroom.projection.overhead`) when it is known.
* ``low``: the least of four CPU outcomes -- the savings fully realised (a new launch costs only a
  launch call), as estimated, as estimated with the profiler's overhead charged per record instead of
  as a clock speed, or not realised at all (the CPU does the old work and launches each new kernel
  where the old work launched its last) -- with the untouched kernels ``gpu_drift.slower`` slower.
* ``high``: the most of the four, with the untouched kernels ``gpu_drift.faster`` faster.
* ``interval``: the calibrated interval at a stated level (90%) from the a-priori rows' errors
  (:mod:`headroom.projection.calibration`), for a measurement without noise of its own; ``headroom validate``
  gives it its measurement's noise.

The drift parameters are data (``headroom/data/projection.toml``), with where they come from;
:func:`calibrate_drift` recomputes them from validation measurements.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headroom.datafiles import read_toml, shipped
from headroom.errors import UserError
from headroom.projection.amdahl import Projection
from headroom.projection.baseline import Baseline
from headroom.projection.cpu import CallChange
from headroom.projection.overhead import Unprofiled, cpu_clock
from headroom.projection.replay import replay

# The CPU outcomes: savings fully realised, as estimated, as estimated with the profiler's overhead per
# record instead of a uniform clock, not realised at all.
BOUNDS = ("high", "estimate", "per_record", "low")


@dataclass(frozen=True)
class Drift:
    """How much slower/faster the kernels a change does not touch may run (fractions of their duration)."""

    slower: float
    faster: float
    source: str = ""


def load_drift(path: str | Path | None = None) -> Drift:
    """The drift parameters: the shipped ``projection.toml``, or a user's file in the same format."""
    doc = read_toml(path) if path else shipped("projection.toml")
    d = doc.get("gpu_drift")
    if not isinstance(d, dict):
        raise UserError(f"{path or 'projection.toml'}: needs a [gpu_drift] table with slower and faster")
    vals = []
    for key in ("slower", "faster"):
        v = d.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 <= v < 1.0):
            raise UserError(f"{path or 'projection.toml'}: gpu_drift.{key} must be a fraction in [0, 1), got {v!r}")
        vals.append(float(v))
    return Drift(vals[0], vals[1], str(d.get("source", "")))


@dataclass
class Estimate:
    """The best estimate of the end-to-end speedup and the interval a measurement should fall inside."""

    speedup: float
    low: float
    high: float
    method: str
    scenario: str
    baseline_us: float  # the base window on the estimate's clock
    projected_us: float
    low_us: float  # the window at `low` (the longest)
    high_us: float  # the window at `high` (the shortest)
    clock: str  # "unprofiled" | "profiled"
    cpu_scale: float
    untouched_fraction: float  # share of the base window the untouched kernels keep busy (what drift acts on)
    drift: Drift
    cpu: dict  # per CPU outcome (high, estimate, low): the window without drift
    # The calibrated interval a validate measurement falls inside at a stated level (headroom.projection.calibration):
    # level, low, high, method. low/high above are the CPU outcomes' bounds, not an interval with a level.
    interval: dict | None = None

    def __post_init__(self) -> None:
        if self.interval is None and math.isfinite(self.speedup) and self.speedup > 0:
            from headroom.projection.calibration import shipped_calibration

            cal = shipped_calibration()
            lo, hi = cal.interval(self.speedup)
            self.interval = {"level": cal.level, "low": lo, "high": hi, "method": cal.method}


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.inf


def estimate_interval(
    b: Baseline,
    factors: np.ndarray,
    changes: Mapping[str, Sequence[CallChange]],
    cpu_scale: float,
    drift: Drift,
    method: str,
    scenario: str,
    clock: str,
    baseline_us: float | None = None,
    window_scale: float = 1.0,
) -> Estimate:
    """Replay the base (no change) and the change under each CPU outcome and drift; `changes` per bound.
    `window_scale`: every replayed window times this (overhead.Unprofiled.window_scale)."""
    base = baseline_us if baseline_us is not None else replay(b, cpu_scale=cpu_scale).projected_us * window_scale
    touched = factors != 1.0
    for chs in changes.values():
        for ch in chs:
            touched[ch.call.events] = True
    wall = b.events["wall_us"].to_numpy(dtype=float) if "wall_us" in b.events.columns else np.zeros(len(factors))
    untouched = float(wall[~touched].sum()) * (base / b.wall_us if b.wall_us > 0 else 1.0)
    windows: dict[str, dict[str, float]] = {}
    replayed: dict[tuple, float] = {}  # bounds with the same changes (e.g. none: speedups only) replay once
    for bound in BOUNDS:
        chs = changes.get(bound, ())
        row = {}
        for name, d in (("none", 0.0), ("slower", drift.slower), ("faster", -drift.faster)):
            key = (tuple(map(id, chs)), d)
            if key not in replayed:
                f = np.where(touched, factors, 1.0 / (1.0 + d))
                replayed[key] = replay(b, f, changes=chs, cpu_scale=cpu_scale).projected_us * window_scale
            row[name] = replayed[key]
        windows[bound] = row
    est = windows["estimate"]["none"]
    longest = max(w["slower"] for w in windows.values())
    shortest = min(w["faster"] for w in windows.values())
    return Estimate(
        _ratio(base, est),
        _ratio(base, longest),
        _ratio(base, shortest),
        method,
        scenario,
        base,
        est,
        longest,
        shortest,
        clock,
        cpu_scale,
        untouched / base if base > 0 else 0.0,
        drift,
        {bound: {"projected_us": w["none"], "speedup": _ratio(base, w["none"])} for bound, w in windows.items()},
    )


def calibrate_drift(records: Iterable[tuple[float, float, float]], source: str = "validation") -> Drift:
    """Drift that covers measured GPU-bound substitutions.

    Each record: (measured speedup, the model's drift-free estimate, untouched fraction of the base
    window). The untouched kernels' implied relative change is
    ``d = (1/measured - 1/estimate) / untouched``; `slower` is the largest d, `faster` the largest -d
    (0 when none). Pass GPU-bound cases: in launch-bound ones the GPU is idle and drift does not show.
    """
    ds = []
    for measured, est, frac in records:
        if measured > 0 and est > 0 and frac > 0:
            ds.append((1.0 / measured - 1.0 / est) / frac)
    if not ds:
        raise UserError("calibrate_drift: no usable records (need measured and estimated speedups > 0)")
    return Drift(max(0.0, max(ds)), max(0.0, -min(ds)), f"{source}: {len(ds)} case(s)")


def scenario_estimate(
    b: Baseline,
    factors: np.ndarray,
    changes: dict[str, list[CallChange]],
    unprof: Unprofiled | None,
    drift: Drift,
    scenario: str,
    use_replay: bool,
    projections: list[Projection],
    amdahl_base_u: float | None,
    cpu_calls: tuple[float, float] | None = None,
) -> Estimate:
    """The first scenario's estimate: the CPU-aware replay on the unprofiled clock where known."""
    if use_replay:
        scale = unprof.cpu_scale if unprof is not None else 1.0
        corrected = unprof is not None and scale != 1.0
        clock = "unprofiled" if unprof is not None else "profiled"  # its windows are scaled to that step
        est = changes.get("estimate", ())
        n_graph = sum(1 for ch in est if ch.graph)
        parts = [f"the CPU side of {len(est) - n_graph} replaced call(s)"] if len(est) > n_graph else []
        parts += [f"the graph nodes of {n_graph} replayed call(s)"] if n_graph else []
        method = "replay" + (f" with {' and '.join(parts)}" if parts else "")
        if corrected and unprof is not None and unprof.clock_source == "calls":
            method += f"; {cpu_clock(scale)}: {unprof.note}"
        elif corrected and unprof is not None:
            method += (
                f", {cpu_clock(scale)}{'' if unprof.reached else f' and the GPU timeline x{unprof.window_scale:.4f}'}"
                f" to the unprofiled {unprof.step_us / 1e3:.3f} ms/step ({unprof.source})"
            )
        elif unprof is not None:
            method += f"; no profiler-overhead correction: {unprof.note}"
        else:
            method += "; no profiler-overhead correction: no unprofiled step time known"
        return estimate_interval(
            b,
            factors,
            changes,
            scale,
            drift,
            method,
            scenario,
            clock,
            baseline_us=unprof.baseline_us if unprof is not None else None,
            window_scale=unprof.window_scale if unprof is not None else 1.0,
        )
    # No GPU timeline (cpu-ops traces): the calls' inclusive CPU time shrinks and everything after it
    # moves up (nothing waits), else Amdahl over op self times; the interval is the untouched time's drift.
    a = next(p for p in projections if p.method == "amdahl" and p.scenario == scenario)
    base = amdahl_base_u if amdahl_base_u is not None else a.baseline_us
    ratio = base / a.baseline_us if a.baseline_us > 0 else 1.0
    if cpu_calls is not None:
        touched_us, saved_us = cpu_calls
        untouched = max(a.baseline_us - touched_us, 0.0) * ratio
        method = "CPU calls: their inclusive CPU time shrinks by the speedup (no GPU timeline to replay)"
    else:
        wall = b.events["wall_us"].to_numpy(dtype=float)
        untouched = float(wall[factors == 1.0].sum()) * ratio
        saved_us = a.saved_us
        method = f"amdahl ({b.mode}: no GPU timeline to replay)"
    proj = base - saved_us * ratio
    lo, hi = proj + drift.slower * untouched, proj - drift.faster * untouched
    clock = "unprofiled" if amdahl_base_u is not None else "profiled"
    return Estimate(
        base / proj if proj > 0 else np.inf,
        base / lo if lo > 0 else np.inf,
        base / hi if hi > 0 else np.inf,
        method,
        scenario,
        base,
        proj,
        lo,
        hi,
        clock,
        ratio,
        untouched / base if base > 0 else 0.0,
        drift,
        {},
    )
