"""Timeline replay: the trace's GPU streams re-run with the selected kernels shortened.

See :mod:`headroom.projection.project` for the model. The plan a replay reads (the measured timeline, memoised per
baseline) is :mod:`headroom.projection.replay_plan`; the event-by-event sweep and the CPU clocks,
:mod:`headroom.projection.replay_sweep`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headroom.projection import chains as chain_solver
from headroom.projection.amdahl import Projection, _factor_array
from headroom.projection.baseline import Baseline, _breakdown, as_baseline
from headroom.projection.cpu import CallChange
from headroom.projection.replay_plan import BACK_TO_BACK_US, MAX_STREAM_GAP_US, _memo, _Plan, _plan
from headroom.projection.replay_sweep import _Clock, _sweep, _sync
from headroom.trace.accounting import overlap_shares
from headroom.trace.analysis import Analysis


@dataclass
class ReplayResult:
    ts: np.ndarray
    end: np.ndarray
    window_end: float
    projected_us: float
    launch_latency_us: float
    n_syncs: int
    n_deps: int
    max_cpu_shift_us: float


def replay(
    base: Baseline | Analysis,
    factors: np.ndarray | float | None = None,
    mask: np.ndarray | None = None,
    back_to_back_us: float = BACK_TO_BACK_US,
    launch_latency_us: float | None = None,
    max_stream_gap_us: float = MAX_STREAM_GAP_US,
    changes: Sequence[CallChange] = (),
    cpu_scale: float = 1.0,
) -> ReplayResult:
    """Re-run the GPU timeline with each event's duration divided by its factor.

    `changes`: replaced calls (:func:`headroom.projection.cpu.change_calls`): their CPU footprint becomes
    the new launches' cost and their kernels run as the new kernels. `cpu_scale`: the speed of the CPU
    timeline relative to the trace (the profiler-overhead correction). See the module docstring.
    """
    b = as_baseline(base)
    f = _factor_array(b, factors, mask)
    ev = b.events
    n = len(ev)
    ts = ev["ts"].to_numpy(dtype=float)
    dur = ev["dur"].to_numpy(dtype=float)
    end = ts + dur
    new_dur = np.where(np.isinf(f), 0.0, dur / f)
    if n == 0:
        return ReplayResult(ts, end, b.window[1], b.wall_us, 0.0, 0, 0, 0.0)
    # `project` replays some cases twice (the check's no-change replay, a bound equal to the projection):
    # a replay without replaced calls is memoised on the baseline by everything it reads.
    memo_key = None if changes else (f.tobytes(), back_to_back_us, launch_latency_us, max_stream_gap_us, cpu_scale)
    memo = _memo(b, "_replays")
    if memo_key is not None and memo_key in memo:
        return memo[memo_key]
    result = _replay(b, f, new_dur, back_to_back_us, launch_latency_us, max_stream_gap_us, changes, cpu_scale)
    if memo_key is not None:
        if len(memo) >= REPLAY_MEMO_SIZE:
            memo.pop(next(iter(memo)))
        memo[memo_key] = result
    return result


REPLAY_MEMO_SIZE = 16


def _replay(
    b: Baseline,
    f: np.ndarray,
    new_dur: np.ndarray,
    back_to_back_us: float,
    launch_latency_us: float | None,
    max_stream_gap_us: float,
    changes: Sequence[CallChange],
    cpu_scale: float,
) -> ReplayResult:
    plan = _plan(b, back_to_back_us, launch_latency_us, max_stream_gap_us, changes)
    o = plan.origin
    clocks = _clocks(b, plan, cpu_scale)
    if changes:
        end2, max_shift = _sweep(plan, new_dur, changes, clocks, cpu_scale)
    else:
        end2, max_shift = _solve_chains(plan, new_dur, clocks, cpu_scale)
    ts2 = end2 - new_dur

    # The window ends at the later of the last GPU end and the last step's CPU end (replayed clock).
    w0, w1 = b.window
    cpu_end = b.step_end - o if b.step_end is not None else -np.inf
    if np.isfinite(cpu_end):
        main_pid = int(np.bincount(plan.pids).argmax()) if len(plan.pids) else 0
        cpu_end = clocks[main_pid].at(cpu_end)
    new_w1 = max(float(np.nanmax(end2)), cpu_end)
    # Keep any part of the measured window the replay does not model (e.g. CPU work after the last step).
    old_model_end = max(float(plan.end.max()), b.step_end - o if b.step_end is not None else -np.inf)
    # The measured window's end was rounded in absolute time (1e-4 us near 1e12): within that, it is the
    # model's end, and what it adds is kept even when it is a hair below (a replay with no change then
    # spans the measured window exactly).
    after = (w1 - o) - old_model_end
    new_w1 += after if after > -4 * float(np.spacing(abs(w1))) else 0.0
    ts2, end2 = ts2 + o, end2 + o
    ts2.setflags(write=False)  # memoised: shared by every caller
    end2.setflags(write=False)
    return ReplayResult(
        ts2,
        end2,
        new_w1 + o,
        new_w1 - (w0 - o) - b.excluded_us,
        plan.launch_latency_us,
        plan.n_sync,
        plan.n_deps,
        max_shift,
    )


def _clocks(b: Baseline, plan: _Plan, cpu_scale: float) -> list[_Clock]:
    """One CPU clock per process code (the events', the blocking calls' and the replaced calls'), from the
    first step's CPU start (else the window's)."""
    anchor = b.step_start if b.step_start is not None and math.isfinite(b.step_start) else float(b.window[0])
    return [_Clock(anchor - plan.origin, cpu_scale) for _ in range(len(plan.pid_table))]


def _chains(plan: _Plan) -> chain_solver.Chains:
    """The plan's chains and segments, built on its first replay without replaced calls."""
    if plan.chains is None:
        a = plan.arrays
        launch, lat, prev, g, dep, d, end, has_launch, pids, ts = (
            a.launch,
            a.lat,
            a.prev,
            a.g,
            a.dep,
            a.d,
            a.end,
            a.has_launch,
            a.pids,
            a.ts,
        )
        plan.chains = chain_solver.build(
            plan.sweep_idx, plan.sweep_kind, prev, dep, launch, has_launch, lat, ts, end, pids, g, d
        )
    return plan.chains


def _solve_chains(plan: _Plan, new_dur: np.ndarray, clocks: list, cpu_scale: float) -> tuple[np.ndarray, float]:
    """No replaced calls: the replay solved a stream chain at a time (chains.py)."""
    shift = [0.0]

    def on_sync(i: int, ends: np.ndarray, max_late: float) -> None:
        shift[0] = max(shift[0], _sync(plan, i, clocks, ends.__getitem__, max_late, cpu_scale))

    end2 = chain_solver.solve(_chains(plan), new_dur, clocks, on_sync)
    return end2, shift[0]


def replay_projection(
    base: Baseline | Analysis,
    factors: np.ndarray | float,
    mask: np.ndarray | None = None,
    scenario: str = "speedups",
    **kw,
) -> Projection:
    b = as_baseline(base)
    f = _factor_array(b, factors, mask)
    r = replay(b, f, **kw)
    ev = b.events
    shares = np.zeros(len(ev))
    devices = ev["device"].to_numpy() if "device" in ev.columns else np.zeros(len(ev))
    for dv in np.unique(devices):
        m = devices == dv
        shares[m] = overlap_shares(r.ts[m], r.end[m])
    bd = _breakdown(b, shares, r.projected_us)
    uniform = float(f[f != 1.0][0]) if np.any(f != 1.0) and np.all(f[f != 1.0] == f[f != 1.0][0]) else None
    return Projection("replay", scenario, b.wall_us, r.projected_us, b.num_steps, bd, uniform)


def replay_gain(base: Baseline | Analysis, factors: np.ndarray | float, mask: np.ndarray | None = None, **kw) -> float:
    """`replay_projection(base, factors, mask).gain` without the breakdown of device time it also
    computes: `targets` replays each of its first rows twice and reads only the gain."""
    b = as_baseline(base)
    r = replay(b, _factor_array(b, factors, mask), **kw)
    return 1.0 - r.projected_us / b.wall_us if b.wall_us > 0 else 0.0


def replay_check(base: Baseline | Analysis) -> dict[str, float]:
    """Replay with no change: how far the model is from the measured timeline (should be ~0)."""
    b = as_baseline(base)
    r = replay(b)
    if len(b.events) == 0:
        return {"max_abs_error_us": 0.0, "window_error_us": 0.0}
    err = np.abs(r.ts - b.events["ts"].to_numpy(dtype=float))
    return {
        "max_abs_error_us": float(np.nanmax(err)),
        "window_error_us": float(r.projected_us - b.wall_us),
        "launch_latency_us": r.launch_latency_us,
        "blocking_calls": r.n_syncs,
        "cross_stream_deps": r.n_deps,
    }
