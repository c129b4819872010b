"""Timeline replay: the trace's GPU streams re-run with the selected kernels shortened.

See :mod:`headroom.projection.project` for the model.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np
import pandas as pd

from headroom.datafiles import shipped
from headroom.projection import chains as chain_solver
from headroom.projection.amdahl import Projection, _factor_array
from headroom.projection.baseline import Baseline, _breakdown, as_baseline, kept
from headroom.projection.cpu import CallChange, blocking_call_names
from headroom.projection.streams import cross_stream_deps, pid_codes, stream_keys
from headroom.trace.accounting import overlap_shares
from headroom.trace.analysis import Analysis
from headroom.trace.intervals import codes_and_texts

BACK_TO_BACK_US = 4.0      # a gap this small after the previous event on the stream = it was queued
DEFAULT_LAUNCH_LATENCY_US = 5.0
# A host synchronisation returns this long after the GPU work it waited for ends (the runtime's wake-up
# and, for `tensor.item()`, a small device-to-host copy): the order of a launch latency.
SYNC_RETURN_US = 5.0
MAX_STREAM_GAP_US = 50.0   # a queued event starting later than this after its predecessor waited on something else


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


class _Clock:
    """One process's CPU clock in the replay: a piecewise-linear map from measured to replayed time.

    Before the anchor (the first step's CPU start) time is unchanged; after it the clock runs at
    `scale` (the profiler-overhead correction, 1.0 = as measured). Breakpoints come in time order:
    replaced CPU footprints (a segment of another length) and blocking calls (where the CPU waited for
    the GPU, the replayed return time).
    """

    __slots__ = ("t", "n", "s")

    def __init__(self, anchor: float, scale: float) -> None:
        self.t, self.n, self.s = [anchor], [anchor], [scale]

    def at(self, x: float) -> float:
        t = self.t
        if x < t[0]:
            return x
        k = bisect.bisect_right(t, x) - 1
        return self.n[k] + self.s[k] * (x - t[k])

    def add(self, x: float, new: float, slope: float) -> None:
        if x < self.t[-1]:   # concurrent threads of one process: keep the map monotone in measured time
            x = self.t[-1]
        if x == self.t[-1]:
            self.n[-1], self.s[-1] = new, slope
        else:
            self.t.append(x)
            self.n.append(new)
            self.s.append(slope)


@dataclass
class _Measured:
    """What replay reads from the measured timeline (`_measured_timeline`), times relative to the window's start."""

    ts: np.ndarray
    end: np.ndarray
    launch: np.ndarray           # the launch call's start (NaN: no launch event)
    has_launch: np.ndarray
    pid_table: dict              # launching process text -> code
    pids: np.ndarray             # each event's launching process code
    prev: np.ndarray             # the previous event on its stream (-1: none)
    gap: np.ndarray              # measured gap after it
    dep: np.ndarray              # cross-stream dependency (-1: none)
    dep_gap: np.ndarray
    lag: np.ndarray              # start minus launch
    syncs: pd.DataFrame          # the blocking CPU calls in the window


@dataclass
class _PlanArrays:
    """Per event, what the sweep and the chain solver read (`_Plan.arrays`)."""

    launch: np.ndarray
    lat: np.ndarray              # launch latency the replay keeps
    prev: np.ndarray
    g: np.ndarray                # the gap to the previous event on the stream the replay keeps
    dep: np.ndarray
    d: np.ndarray                # the gap after the cross-stream dependency the replay keeps
    end: np.ndarray
    has_launch: np.ndarray
    pids: np.ndarray
    ts: np.ndarray
    call_of: np.ndarray          # the replaced call an event belongs to (-1: none)
    group_of: np.ndarray         # its new kernel within that call
    removed: np.ndarray          # in a call that launches nothing after the change

    def lists(self) -> dict[str, list]:
        """Each field as a plain list, by name (the event-by-event sweep indexes them in a Python loop)."""
        return {f.name: getattr(self, f.name).tolist() for f in dataclasses.fields(self)}


def _measured_timeline(b: Baseline) -> _Measured:
    """What replay reads from the measured timeline, whatever the factors: launches, launching
    threads, each event's predecessor on its stream and cross-stream dependency with the measured
    gaps and lags, and the blocking CPU calls in the window. Computed once per baseline (`targets`
    replays one trace many times). Times relative to the window's start (see chains.py), launches too;
    an end is start + duration in that frame, so a replay with no change reproduces it."""
    memo = _memo(b, "_measured_timeline")
    if "timeline" in memo:
        return memo["timeline"]
    ev = b.events
    n = len(ev)
    origin = _origin(b)
    ts = ev["ts"].to_numpy(dtype=float) - origin
    end = ts + ev["dur"].to_numpy(dtype=float)
    launch = ev["launch_ts"].to_numpy(dtype=float) - origin if "launch_ts" in ev.columns else np.full(n, np.nan)
    has_launch = np.isfinite(launch)
    pid_table: dict = {}
    pids = pid_codes(ev["launch_pid"] if "launch_pid" in ev.columns else [""] * n, pid_table)

    # Previous event on the same stream, and the measured gaps/lags.
    streams = stream_keys(ev)
    order = np.lexsort((end, ts, streams))        # by stream, then start, then end
    prev = np.full(n, -1, dtype=np.int64)
    same = streams[order[1:]] == streams[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    gap = np.where(prev >= 0, ts - end[np.maximum(prev, 0)], np.inf)
    dep = cross_stream_deps(ev, b.syncs, b.runtime)
    dep_gap = np.where(dep >= 0, ts - end[np.maximum(dep, 0)], np.inf)
    lag = np.where(has_launch, ts - launch, 0.0)
    # Blocking synchronisations on the CPU (inside the window).
    syncs = _blocking_calls(b, pid_table)
    result = _Measured(ts, end, launch, has_launch, pid_table, pids, prev, gap, dep, dep_gap, lag, syncs)
    memo["timeline"] = result
    return result


def _origin(b: Baseline) -> float:
    """What a replay's times are relative to: the window's start (chains.py says why)."""
    return float(b.window[0])


def replay(base: Baseline | Analysis, factors: np.ndarray | float | None = None, mask: np.ndarray | None = None,
           back_to_back_us: float = BACK_TO_BACK_US, launch_latency_us: float | None = None,
           max_stream_gap_us: float = MAX_STREAM_GAP_US, changes: Sequence[CallChange] = (),
           cpu_scale: float = 1.0) -> ReplayResult:
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


def _memo(b: Baseline, name: str) -> dict:
    """A dict kept on the baseline under `name`, emptied when a field a replay reads was replaced."""
    return kept(b, name, b.events, b.syncs, b.runtime, b.window, b.step_start, b.step_end, b.wall_us)


@dataclass
class _Plan:
    """What a replay reads that its factors do not change: the measured timeline turned into the sweep's
    order and plain lists. Memoised per baseline and parameters when no call is replaced (`targets` and
    `project` replay one baseline with many factors)."""

    launch_latency_us: float
    pid_table: dict
    pieces: list
    ch_pid: list
    sweep_idx: np.ndarray        # what the sweep visits, in order: its index, and its kind (0-3, `_sweep`)
    sweep_kind: np.ndarray
    by_end: np.ndarray
    end_sorted: np.ndarray
    launch: np.ndarray
    end: np.ndarray
    corr: np.ndarray
    s_corr: np.ndarray
    sync_rows: list        # per blocking call: process code, measured start and end, and `hi` (`_sync`), plain
    end_sorted_list: list  # end_sorted as a list: a blocking call bisects it (no numpy call per search)
    pids: np.ndarray
    n_sync: int
    n_deps: int
    arrays: _PlanArrays
    origin: float    # times in the plan are relative to this (the window's start): see chains.py
    chains: chain_solver.Chains | None = None    # built on the first replay without replaced calls

    def lists(self) -> tuple[list, list, dict[str, list]]:
        """The sweep's order and `arrays` as plain lists, for the event-by-event sweep (list indexing is much
        faster than numpy's in a Python loop). Built when asked: a replay without replaced calls (the chain
        solver's) reads none of them, and 13 lists of every event cost more than its replay."""
        return self.sweep_idx.tolist(), self.sweep_kind.tolist(), self.arrays.lists()


def _plan(b: Baseline, back_to_back_us: float, launch_latency_us: float | None, max_stream_gap_us: float,
          changes: Sequence[CallChange]) -> _Plan:
    if not changes:
        memo = _memo(b, "_plans")
        key = (back_to_back_us, launch_latency_us, max_stream_gap_us)
        if key not in memo:
            memo[key] = _new_plan(b, back_to_back_us, launch_latency_us, max_stream_gap_us, changes)
        return memo[key]
    return _new_plan(b, back_to_back_us, launch_latency_us, max_stream_gap_us, changes)


def _new_plan(b: Baseline, back_to_back_us: float, launch_latency_us: float | None, max_stream_gap_us: float,
              changes: Sequence[CallChange]) -> _Plan:
    ev = b.events
    n = len(ev)
    origin = _origin(b)
    tl = _measured_timeline(b)
    ts, end, launch, has_launch, pids, prev, dep = tl.ts, tl.end, tl.launch, tl.has_launch, tl.pids, tl.prev, tl.dep
    gap, dep_gap, lag, syncs = tl.gap, tl.dep_gap, tl.lag, tl.syncs
    pid_table = tl.pid_table
    # Queued behind its stream: back to back with the previous event, or launched
    # while the stream was still busy (then it keeps its measured gap after it).
    # A longer gap than `max_stream_gap_us` after the previous event is an unexplained wait
    # (e.g. on another stream): held fixed rather than assumed to shrink.
    busy_at_launch = (prev >= 0) & has_launch & (launch < end[np.maximum(prev, 0)])
    stream_bound = (gap <= back_to_back_us) | (busy_at_launch & (gap <= max_stream_gap_us))
    queued = stream_bound | (dep_gap <= back_to_back_us)
    if launch_latency_us is None:
        free_lags = lag[~queued & has_launch & (lag >= 0)]
        launch_latency_us = float(np.percentile(free_lags, 25)) if len(free_lags) >= 10 \
            else DEFAULT_LAUNCH_LATENCY_US
    lat = np.where(queued, np.minimum(lag, launch_latency_us), lag)
    g = np.where(stream_bound, gap, np.minimum(gap, back_to_back_us))
    d = np.minimum(dep_gap, back_to_back_us)

    # Replaced calls: which new kernel (group) each of their events runs in, and when it is launched.
    pid_table = dict(pid_table)     # the memo's table, extended by the calls' processes
    call_of = np.full(n, -1, dtype=np.int64)
    group_of = np.full(n, -1, dtype=np.int64)
    removed = np.zeros(n, dtype=bool)
    pieces: list[tuple[float, int, int]] = []  # (measured start, change, piece number)
    ch_pid: list[int] = []
    for c, ch in enumerate(changes):
        call_of[ch.call.events] = c
        removed[ch.call.events] = len(ch.groups) == 0
        for k, grp in enumerate(ch.groups):
            group_of[grp] = k
        ch_pid.append(pid_table.setdefault(ch.call.pid, len(pid_table)))
        if ch.cpu:
            for j, (a, _) in enumerate(ch.call.pieces):
                pieces.append((a, c, j))
    in_call = call_of >= 0
    same_call = in_call & (prev >= 0) & (call_of[np.maximum(prev, 0)] == call_of)
    g = np.where(same_call, 0.0, g)          # a fused kernel has no gaps inside
    lat = np.where(in_call, launch_latency_us, lat)

    # Synthetic blocking calls: a replaced call that synchronises with the host after the change waits, at
    # the end of its (last) footprint, for everything launched before. Then the sweep runs in the CPU's
    # program order (events by their launch), so everything such a wait depends on is replayed before it.
    synth = [(changes[c].call.pieces[-1][1], ch_pid[c], changes[c].syncs) for c in range(len(changes))
             if changes[c].syncs > 0 and changes[c].cpu and changes[c].call.pieces]
    if synth:
        syncs = pd.concat([syncs.assign(synthetic=0), pd.DataFrame(
            {"ts": [z for z, _, _ in synth], "end": [z for z, _, _ in synth], "pid_code": [p for _, p, _ in synth],
             "correlation": -1, "synthetic": [k for _, _, k in synth]})], ignore_index=True)
    n_sync = len(syncs)
    # Events sorted by measured end, to find what a sync waited for.
    by_end = np.argsort(end, kind="stable")
    end_sorted = end[by_end]

    # Merged sweep: footprint starts and ends, syncs by measured end, events by measured start
    # (in that order on ties).
    p_start = np.array([p[0] for p in pieces], dtype=float) - origin
    p_end = np.array([changes[c].call.pieces[j][1] for _, c, j in pieces], dtype=float) - origin
    n_p = len(pieces)
    s_ts = syncs["ts"].to_numpy(dtype=float) - origin if n_sync else np.zeros(0)
    s_end = syncs["end"].to_numpy(dtype=float) - origin if n_sync else np.zeros(0)
    ev_key = np.where(has_launch, launch, ts) if synth else ts
    keys = np.concatenate([p_start, p_end, s_end, ev_key])
    kind = np.concatenate([np.zeros(n_p, dtype=np.int8), np.ones(n_p, dtype=np.int8),
                           np.full(n_sync, 2, dtype=np.int8), np.full(n, 3, dtype=np.int8)])
    idx = np.concatenate([np.arange(n_p), np.arange(n_p), np.arange(n_sync), np.arange(n)])
    sweep = np.lexsort((kind, keys))

    s_pid = syncs["pid_code"].to_numpy() if n_sync else np.zeros(0, dtype=np.int64)
    s_corr = syncs["correlation"].to_numpy() if n_sync else np.zeros(0)
    # What a blocking call reads that no factor changes, per call: the end of what it can have waited for.
    s_hi = end_sorted.searchsorted(s_end, side="right")
    s_syn = syncs["synthetic"].to_numpy(dtype=np.int64) if synth else np.zeros(n_sync, dtype=np.int64)
    s_hi = np.where(s_syn > 0, n, s_hi)   # a synthetic wait is for whatever was launched before it
    sync_rows = list(zip(s_pid.astype(np.int64).tolist(), s_ts.tolist(), s_end.tolist(), s_hi.tolist(),
                         s_syn.tolist()))
    corr = ev["correlation"].to_numpy() if "correlation" in ev.columns else np.full(n, -1)
    arrays = _PlanArrays(launch, lat, prev, g, dep, d, end, has_launch, pids, ts, call_of, group_of, removed)
    return _Plan(float(launch_latency_us), pid_table, pieces, ch_pid, idx[sweep], kind[sweep],
                 by_end, end_sorted, launch, end, corr, s_corr, sync_rows, end_sorted.tolist(),
                 pids, n_sync, int((dep >= 0).sum()), arrays, origin)


def _sync(plan: _Plan, i: int, clocks: list, ends_of: Callable[[np.ndarray], np.ndarray], max_late: float,
          cpu_scale: float) -> float:
    """Blocking call i returns when what it waited for has ended on the replayed GPU: its process's clock
    moves there. `ends_of(events)`: their replayed ends so far (NaN: not replayed yet). Returns how far
    the call's return moved."""
    pid, t0, t1, hi, synthetic = plan.sync_rows[i]  # hi: events by measured end, those ending after t1 excluded
    clk = clocks[pid]
    new_t0 = clk.at(t0)
    dl = new_t0 - t0
    if synthetic:  # waits for everything launched before it (replayed already: the sweep is in program order)
        cand = plan.by_end[plan.launch[plan.by_end] <= t0]
        g = -math.inf
        if len(cand):
            e2 = ends_of(cand)
            done = e2 == e2
            if done.any():
                g = float(e2[done].max())
        new_end = max(new_t0, g + SYNC_RETURN_US * synthetic)
        clk.add(t1, new_end, cpu_scale)
        return abs(new_end - t1)
    lo = bisect.bisect_left(plan.end_sorted_list, t0 + min(dl, 0.0) - max_late)
    g_meas = g_new = -math.inf
    if hi > lo:
        cand = plan.by_end[lo:hi]
        cand = cand[(plan.launch[cand] <= t0) | (plan.corr[cand] == plan.s_corr[i])]
        if len(cand):
            e2 = ends_of(cand)
            done = e2 == e2          # replayed already (not NaN)
            if done.any():
                g_new = float(e2[done].max())
                g_meas = float(plan.end[cand[done]].max())
    wait = max(0.0, g_meas - t0)
    nowait = (t1 - t0) - wait
    new_end = cpu_scale * nowait + max(new_t0, g_new)
    clk.add(t1, new_end, cpu_scale)
    return abs(new_end - t1)


def _replay(b: Baseline, f: np.ndarray, new_dur: np.ndarray, back_to_back_us: float, launch_latency_us: float | None,
            max_stream_gap_us: float, changes: Sequence[CallChange], cpu_scale: float) -> ReplayResult:
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
    ts2.setflags(write=False)       # memoised: shared by every caller
    end2.setflags(write=False)
    return ReplayResult(ts2, end2, new_w1 + o, new_w1 - (w0 - o) - b.excluded_us, plan.launch_latency_us, plan.n_sync,
                        plan.n_deps, max_shift)


def _clocks(b: Baseline, plan: _Plan, cpu_scale: float) -> list[_Clock]:
    """One CPU clock per process code (the events', the blocking calls' and the replaced calls'), from the
    first step's CPU start (else the window's)."""
    anchor = b.step_start if b.step_start is not None and math.isfinite(b.step_start) else float(b.window[0])
    return [_Clock(anchor - plan.origin, cpu_scale) for _ in range(len(plan.pid_table))]


def _chains(plan: _Plan) -> chain_solver.Chains:
    """The plan's chains and segments, built on its first replay without replaced calls."""
    if plan.chains is None:
        a = plan.arrays
        launch, lat, prev, g, dep, d, end, has_launch, pids, ts = (a.launch, a.lat, a.prev, a.g, a.dep, a.d, a.end,
                                                                   a.has_launch, a.pids, a.ts)
        plan.chains = chain_solver.build(plan.sweep_idx, plan.sweep_kind, prev, dep, launch, has_launch, lat, ts,
                                         end, pids, g, d)
    return plan.chains


def _solve_chains(plan: _Plan, new_dur: np.ndarray, clocks: list, cpu_scale: float) -> tuple[np.ndarray, float]:
    """No replaced calls: the replay solved a stream chain at a time (chains.py)."""
    shift = [0.0]

    def on_sync(i: int, ends: np.ndarray, max_late: float) -> None:
        shift[0] = max(shift[0], _sync(plan, i, clocks, ends.__getitem__, max_late, cpu_scale))
    end2 = chain_solver.solve(_chains(plan), new_dur, clocks, on_sync)
    return end2, shift[0]


def _sweep(plan: _Plan, new_dur: np.ndarray, changes: Sequence[CallChange], clocks: list,
           cpu_scale: float) -> tuple[np.ndarray, float]:
    """The replay event by event in the sweep's order (replaced calls move CPU clocks as it goes)."""
    n = len(new_dur)
    o = plan.origin
    sweep_idx, sweep_kind, L = plan.lists()
    # local names: the loop below reads them for every event
    L_launch, L_lat, L_prev, L_g, L_dep, L_d, L_end = (L[k] for k in ("launch", "lat", "prev", "g", "dep", "d", "end"))
    L_has, L_pid, L_ts, L_call, L_group, L_removed = (L[k] for k in ("has_launch", "pids", "ts", "call_of", "group_of",
                                                                     "removed"))
    L_dur = new_dur.tolist()
    pieces, ch_pid = plan.pieces, plan.ch_pid
    group_launch: list[list[float]] = [[math.nan] * len(ch.groups) for ch in changes]   # filled in the sweep
    max_late = 0.0
    max_shift = 0.0
    piece_new_start = [0.0] * len(pieces)
    piece_new_len = [0.0] * len(pieces)
    bisect_right = bisect.bisect_right
    end2_l = [math.nan] * n

    def ends_of(cand: np.ndarray) -> np.ndarray:
        # The candidates' replayed ends so far, gathered in C (a sync can have 10^4 of them).
        return np.array(itemgetter(*cand.tolist())(end2_l) if len(cand) > 1 else [end2_l[int(cand[0])]],
                        dtype=float)
    for i, k in zip(sweep_idx, sweep_kind):
        if k == 3:
            c = L_call[i]
            if c < 0:                            # the common case, inlined: its launch on its clock
                if L_has[i]:
                    clk = clocks[L_pid[i]]
                    x = L_launch[i]
                    t = clk.t
                    if x < t[0]:
                        start = x + L_lat[i]
                    else:
                        j = bisect_right(t, x) - 1 if len(t) > 1 else 0
                        start = clk.n[j] + clk.s[j] * (x - t[j]) + L_lat[i]
                else:
                    start = L_ts[i]
            elif L_removed[i]:   # the call launches nothing now: its work runs inside its stream predecessor
                p = L_prev[i]
                start = end2_l[p] if p >= 0 and end2_l[p] == end2_l[p] else (L_launch[i] if L_has[i] else L_ts[i])
                end2_l[i] = start + L_dur[i]
                continue
            else:
                gl = group_launch[c][L_group[i]]
                if gl != gl:                     # CPU unchanged (the lower bound): at the group's last launch
                    ch = changes[c]
                    last_i = int(ch.groups[L_group[i]][-1])
                    gl = clocks[ch_pid[c]].at(L_launch[last_i])
                    group_launch[c][L_group[i]] = gl
                start = gl + L_lat[i]
            p = L_prev[i]
            if p >= 0:
                v = end2_l[p] + L_g[i]
                if v > start:
                    start = v
            q = L_dep[i]
            if q >= 0:
                v = end2_l[q] + L_d[i]
                if v > start:  # NaN (producer not replayed yet) compares False
                    start = v
            e2 = start + L_dur[i]
            end2_l[i] = e2
            if e2 - L_end[i] > max_late:
                max_late = e2 - L_end[i]
        elif k == 0:                             # a replaced footprint starts
            _, c, j = pieces[i]
            ch = changes[c]
            a, z = ch.call.pieces[j]
            a, z = a - o, z - o
            clk = clocks[ch_pid[c]]
            new_a = clk.at(a)
            new_len = cpu_scale * ch.added_us if j == 0 else 0.0
            if j == 0:
                group_launch[c] = [new_a + cpu_scale * t for t in ch.launch_at]
            piece_new_start[i], piece_new_len[i] = new_a, new_len
            clk.add(a, new_a, new_len / (z - a) if z > a else cpu_scale)
        elif k == 1:                             # ... and ends
            _, c, j = pieces[i]
            z = changes[c].call.pieces[j][1] - o
            new_z = piece_new_start[i] + piece_new_len[i]
            clocks[ch_pid[c]].add(z, new_z, cpu_scale)
            max_shift = max(max_shift, abs(new_z - z))
        else:
            max_shift = max(max_shift, _sync(plan, i, clocks, ends_of, max_late, cpu_scale))
    return np.array(end2_l, dtype=float), max_shift


def _blocking_calls(b: Baseline, pid_table: dict) -> pd.DataFrame:
    cols = ["ts", "end", "pid_code", "correlation"]
    rt = b.runtime
    if rt is None or len(rt) == 0 or "name" not in rt.columns:
        return pd.DataFrame(columns=cols)
    blocking = blocking_call_names()
    codes, names = pd.factorize(rt["name"].astype(object), use_na_sentinel=False)    # matched once per name
    hit = np.array([blocking.fullmatch(str(s)) is not None for s in names], dtype=bool)[codes] if len(names) \
        else np.zeros(len(rt), dtype=bool)
    # cudaMemcpyAsync to/from pageable host memory synchronises with its stream.
    ev = b.events
    if "correlation" in rt.columns and "correlation" in ev.columns and len(ev):
        marker = shipped("runtime.toml")["pageable_copy_marker"]
        codes_ev, texts = codes_and_texts(ev["name"])          # matched once per distinct name (-1: none)
        pageable = np.array([marker in t for t in texts] + [False], dtype=bool)[codes_ev]
        if pageable.any():
            corrs = set(ev.loc[pageable, "correlation"].tolist())
            hit = hit | rt["correlation"].isin(corrs).to_numpy(dtype=bool)
    r = rt.loc[hit]
    w0, w1 = b.window
    r = r[(r["ts"] >= w0) & (r["ts"] <= w1)]
    if len(r) == 0:
        return pd.DataFrame(columns=cols)
    out = pd.DataFrame({
        "ts": r["ts"].to_numpy(dtype=float),
        "end": (r["ts"] + r["dur"]).to_numpy(dtype=float),
        "pid_code": pid_codes(r["pid"] if "pid" in r.columns else [""] * len(r), pid_table),
        "correlation": r["correlation"].to_numpy() if "correlation" in r.columns else -1,
    })
    return out


def replay_projection(base: Baseline | Analysis, factors: np.ndarray | float, mask: np.ndarray | None = None,
                      scenario: str = "speedups", **kw) -> Projection:
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


def replay_gain(base: Baseline | Analysis, factors: np.ndarray | float, mask: np.ndarray | None = None,
                **kw) -> float:
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
    return {"max_abs_error_us": float(np.nanmax(err)), "window_error_us": float(r.projected_us - b.wall_us),
            "launch_latency_us": r.launch_latency_us, "blocking_calls": r.n_syncs, "cross_stream_deps": r.n_deps}

