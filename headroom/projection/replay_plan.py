"""The replay's plan: what a replay reads from the measured timeline that its factors do not change.

Each event's launch, its predecessor on its stream and its cross-stream dependency with the measured gaps and lags,
the blocking CPU calls in the window, the gaps and launch latencies a replay keeps (queued events keep their queueing,
the rest their measured lag), the replaced calls' layout, and the sweep's order. Memoised per baseline.
See :mod:`headroom.projection.replay` for the replay itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headroom.datafiles import shipped
from headroom.projection import chains as chain_solver
from headroom.projection.baseline import Baseline, kept
from headroom.projection.cpu import CallChange, blocking_call_names
from headroom.projection.streams import baseline_waits, pid_codes, stream_keys
from headroom.trace.intervals import codes_and_texts

BACK_TO_BACK_US = 4.0  # a gap this small after the previous event on the stream = it was queued
DEFAULT_LAUNCH_LATENCY_US = 5.0
MAX_STREAM_GAP_US = 50.0  # a queued event starting later than this after its predecessor waited on something else


@dataclass
class _Measured:
    """What replay reads from the measured timeline (`_measured_timeline`), times relative to the window's start."""

    ts: np.ndarray
    end: np.ndarray
    launch: np.ndarray  # the launch call's start (NaN: no launch event)
    has_launch: np.ndarray
    pid_table: dict  # launching process text -> code
    pids: np.ndarray  # each event's launching process code
    prev: np.ndarray  # the previous event on its stream (-1: none)
    gap: np.ndarray  # measured gap after it
    dep: np.ndarray  # cross-stream dependency (-1: none)
    dep_gap: np.ndarray
    lag: np.ndarray  # start minus launch
    syncs: pd.DataFrame  # the blocking CPU calls in the window


@dataclass
class _PlanArrays:
    """Per event, what the sweep and the chain solver read (`_Plan.arrays`)."""

    launch: np.ndarray
    lat: np.ndarray  # launch latency the replay keeps
    prev: np.ndarray
    g: np.ndarray  # the gap to the previous event on the stream the replay keeps
    dep: np.ndarray
    d: np.ndarray  # the gap after the cross-stream dependency the replay keeps
    end: np.ndarray
    has_launch: np.ndarray
    pids: np.ndarray
    ts: np.ndarray
    call_of: np.ndarray  # the replaced call an event belongs to (-1: none)
    group_of: np.ndarray  # its new kernel within that call
    removed: np.ndarray  # in a call that launches nothing after the change

    def lists(self) -> dict[str, list]:
        """Each field as a plain list, by name (the event-by-event sweep indexes them in a Python loop)."""
        return {f.name: getattr(self, f.name).tolist() for f in dataclasses.fields(self)}


def stream_predecessors(b: Baseline) -> tuple[np.ndarray, np.ndarray]:
    """Each event's predecessor on its stream (-1: none) and the measured gap after it (us), as the replay
    reads them (memoised on the baseline)."""
    tl = _measured_timeline(b)
    return tl.prev, tl.gap


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
    order = np.lexsort((end, ts, streams))  # by stream, then start, then end
    prev = np.full(n, -1, dtype=np.int64)
    same = streams[order[1:]] == streams[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    gap = np.where(prev >= 0, ts - end[np.maximum(prev, 0)], np.inf)
    dep = baseline_waits(b).dep
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
    sweep_idx: np.ndarray  # what the sweep visits, in order: its index, and its kind (0-3, `_sweep`)
    sweep_kind: np.ndarray
    by_end: np.ndarray
    end_sorted: np.ndarray
    launch: np.ndarray
    end: np.ndarray
    corr: np.ndarray
    s_corr: np.ndarray
    sync_rows: list  # per blocking call: process code, measured start and end, and `hi` (`_sync`), plain
    end_sorted_list: list  # end_sorted as a list: a blocking call bisects it (no numpy call per search)
    pids: np.ndarray
    n_sync: int
    n_deps: int
    arrays: _PlanArrays
    origin: float  # times in the plan are relative to this (the window's start): see chains.py
    chains: chain_solver.Chains | None = None  # built on the first replay without replaced calls

    def lists(self) -> tuple[list, list, dict[str, list]]:
        """The sweep's order and `arrays` as plain lists, for the event-by-event sweep (list indexing is much
        faster than numpy's in a Python loop). Built when asked: a replay without replaced calls (the chain
        solver's) reads none of them, and 13 lists of every event cost more than its replay."""
        return self.sweep_idx.tolist(), self.sweep_kind.tolist(), self.arrays.lists()


def _plan(
    b: Baseline,
    back_to_back_us: float,
    launch_latency_us: float | None,
    max_stream_gap_us: float,
    changes: Sequence[CallChange],
) -> _Plan:
    if not changes:
        memo = _memo(b, "_plans")
        key = (back_to_back_us, launch_latency_us, max_stream_gap_us)
        if key not in memo:
            memo[key] = _new_plan(b, back_to_back_us, launch_latency_us, max_stream_gap_us, changes)
        return memo[key]
    return _new_plan(b, back_to_back_us, launch_latency_us, max_stream_gap_us, changes)


def _new_plan(
    b: Baseline,
    back_to_back_us: float,
    launch_latency_us: float | None,
    max_stream_gap_us: float,
    changes: Sequence[CallChange],
) -> _Plan:
    n = len(b.events)
    tl = _measured_timeline(b)
    launch_latency_us, lat, g, d = _kept_gaps(tl, back_to_back_us, launch_latency_us, max_stream_gap_us)
    pid_table = dict(tl.pid_table)  # the memo's table, extended by the calls' processes
    lay = _changed_calls(n, changes, pid_table)
    in_call = lay.call_of >= 0
    prev = tl.prev
    same_call = in_call & (prev >= 0) & (lay.call_of[np.maximum(prev, 0)] == lay.call_of)
    # A fused kernel has no gaps inside. A graph's new kernels are still nodes: the gaps between them stay.
    same_group = same_call & (lay.group_of[np.maximum(prev, 0)] == lay.group_of)
    g = np.where(np.where(lay.graph, same_group, same_call), 0.0, g) + lay.added_gap
    lat = np.where(in_call, launch_latency_us, lat)
    order = _sweep_order(b, tl, changes, lay)
    corr = b.events["correlation"].to_numpy() if "correlation" in b.events.columns else np.full(n, -1)
    arrays = _PlanArrays(
        tl.launch,
        lat,
        prev,
        g,
        tl.dep,
        d,
        tl.end,
        tl.has_launch,
        tl.pids,
        tl.ts,
        lay.call_of,
        lay.group_of,
        lay.removed,
    )
    return _Plan(
        float(launch_latency_us),
        pid_table,
        lay.pieces,
        lay.ch_pid,
        order.sweep_idx,
        order.sweep_kind,
        order.by_end,
        order.end_sorted,
        tl.launch,
        tl.end,
        corr,
        order.s_corr,
        order.sync_rows,
        order.end_sorted.tolist(),
        tl.pids,
        order.n_sync,
        int((tl.dep >= 0).sum()),
        arrays,
        _origin(b),
    )


def _kept_gaps(
    tl: _Measured, back_to_back_us: float, launch_latency_us: float | None, max_stream_gap_us: float
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """What a replay keeps of the measured queueing: the launch latency (given, else the 25th percentile of the
    free events' lags), and per event the latency, the gap after its stream predecessor and the gap after its
    cross-stream dependency."""
    prev, gap, has_launch, launch, end = tl.prev, tl.gap, tl.has_launch, tl.launch, tl.end
    # Queued behind its stream: back to back with the previous event, or launched
    # while the stream was still busy (then it keeps its measured gap after it).
    # A longer gap than `max_stream_gap_us` after the previous event is an unexplained wait
    # (e.g. on another stream): held fixed rather than assumed to shrink.
    busy_at_launch = (prev >= 0) & has_launch & (launch < end[np.maximum(prev, 0)])
    stream_bound = (gap <= back_to_back_us) | (busy_at_launch & (gap <= max_stream_gap_us))
    queued = stream_bound | (tl.dep_gap <= back_to_back_us)
    lag = tl.lag
    if launch_latency_us is None:
        free_lags = lag[~queued & has_launch & (lag >= 0)]
        launch_latency_us = float(np.percentile(free_lags, 25)) if len(free_lags) >= 10 else DEFAULT_LAUNCH_LATENCY_US
    lat = np.where(queued, np.minimum(lag, launch_latency_us), lag)
    g = np.where(stream_bound, gap, np.minimum(gap, back_to_back_us))
    d = np.minimum(tl.dep_gap, back_to_back_us)
    return launch_latency_us, lat, g, d


@dataclass
class _CallLayout:
    """Replaced calls: which new kernel (group) each of their events runs in, and their CPU footprints."""

    call_of: np.ndarray
    group_of: np.ndarray
    removed: np.ndarray
    graph: np.ndarray  # events of calls a CUDA graph replays
    added_gap: np.ndarray  # idle GPU time before an event: the gaps of the graph nodes its call gains
    pieces: list[tuple[float, int, int]]  # (measured start, change, piece number)
    ch_pid: list[int]  # each change's process code


def _changed_calls(n: int, changes: Sequence[CallChange], pid_table: dict) -> _CallLayout:
    call_of = np.full(n, -1, dtype=np.int64)
    group_of = np.full(n, -1, dtype=np.int64)
    removed = np.zeros(n, dtype=bool)
    graph = np.zeros(n, dtype=bool)
    added_gap = np.zeros(n)
    pieces: list[tuple[float, int, int]] = []
    ch_pid: list[int] = []
    for c, ch in enumerate(changes):
        call_of[ch.call.events] = c
        removed[ch.call.events] = len(ch.groups) == 0
        graph[ch.call.events] = ch.graph
        if ch.added_gap_us > 0 and len(ch.call.events):
            added_gap[ch.call.events[0]] += ch.added_gap_us
        for k, grp in enumerate(ch.groups):
            group_of[grp] = k
        ch_pid.append(pid_table.setdefault(ch.call.pid, len(pid_table)))
        if ch.cpu:
            for j, (a, _) in enumerate(ch.call.pieces):
                pieces.append((a, c, j))
    return _CallLayout(call_of, group_of, removed, graph, added_gap, pieces, ch_pid)


@dataclass
class _SweepOrder:
    sweep_idx: np.ndarray
    sweep_kind: np.ndarray
    by_end: np.ndarray
    end_sorted: np.ndarray
    s_corr: np.ndarray
    sync_rows: list
    n_sync: int


def _sweep_order(b: Baseline, tl: _Measured, changes: Sequence[CallChange], lay: _CallLayout) -> _SweepOrder:
    """The blocking calls (the measured ones and the replaced calls' synthetic waits) and the sweep's order."""
    n = len(tl.ts)
    origin = _origin(b)
    syncs, pieces, ch_pid = tl.syncs, lay.pieces, lay.ch_pid
    # Synthetic blocking calls: a replaced call that synchronises with the host after the change waits, at
    # the end of its (last) footprint, for everything launched before. Then the sweep runs in the CPU's
    # program order (events by their launch), so everything such a wait depends on is replayed before it.
    synth = [
        (changes[c].call.pieces[-1][1], ch_pid[c], changes[c].syncs)
        for c in range(len(changes))
        if changes[c].syncs > 0 and changes[c].cpu and changes[c].call.pieces
    ]
    if synth:
        syncs = pd.concat(
            [
                syncs.assign(synthetic=0),
                pd.DataFrame(
                    {
                        "ts": [z for z, _, _ in synth],
                        "end": [z for z, _, _ in synth],
                        "pid_code": [p for _, p, _ in synth],
                        "correlation": -1,
                        "synthetic": [k for _, _, k in synth],
                    }
                ),
            ],
            ignore_index=True,
        )
    n_sync = len(syncs)
    # Events sorted by measured end, to find what a sync waited for.
    by_end = np.argsort(tl.end, kind="stable")
    end_sorted = tl.end[by_end]

    # Merged sweep: footprint starts and ends, syncs by measured end, events by measured start
    # (in that order on ties).
    p_start = np.array([p[0] for p in pieces], dtype=float) - origin
    p_end = np.array([changes[c].call.pieces[j][1] for _, c, j in pieces], dtype=float) - origin
    n_p = len(pieces)
    s_ts = syncs["ts"].to_numpy(dtype=float) - origin if n_sync else np.zeros(0)
    s_end = syncs["end"].to_numpy(dtype=float) - origin if n_sync else np.zeros(0)
    ev_key = np.where(tl.has_launch, tl.launch, tl.ts) if synth else tl.ts
    keys = np.concatenate([p_start, p_end, s_end, ev_key])
    kind = np.concatenate(
        [
            np.zeros(n_p, dtype=np.int8),
            np.ones(n_p, dtype=np.int8),
            np.full(n_sync, 2, dtype=np.int8),
            np.full(n, 3, dtype=np.int8),
        ]
    )
    idx = np.concatenate([np.arange(n_p), np.arange(n_p), np.arange(n_sync), np.arange(n)])
    sweep = np.lexsort((kind, keys))

    s_pid = syncs["pid_code"].to_numpy() if n_sync else np.zeros(0, dtype=np.int64)
    s_corr = syncs["correlation"].to_numpy() if n_sync else np.zeros(0)
    # What a blocking call reads that no factor changes, per call: the end of what it can have waited for.
    s_hi = end_sorted.searchsorted(s_end, side="right")
    s_syn = syncs["synthetic"].to_numpy(dtype=np.int64) if synth else np.zeros(n_sync, dtype=np.int64)
    s_hi = np.where(s_syn > 0, n, s_hi)  # a synthetic wait is for whatever was launched before it
    sync_rows = list(zip(s_pid.astype(np.int64).tolist(), s_ts.tolist(), s_end.tolist(), s_hi.tolist(), s_syn.tolist()))
    return _SweepOrder(idx[sweep], kind[sweep], by_end, end_sorted, s_corr, sync_rows, n_sync)


def _blocking_calls(b: Baseline, pid_table: dict) -> pd.DataFrame:
    cols = ["ts", "end", "pid_code", "correlation"]
    rt = b.runtime
    if rt is None or len(rt) == 0 or "name" not in rt.columns:
        return pd.DataFrame(columns=cols)
    blocking = blocking_call_names()
    codes, names = pd.factorize(rt["name"].astype(object), use_na_sentinel=False)  # matched once per name
    hit = (
        np.array([blocking.fullmatch(str(s)) is not None for s in names], dtype=bool)[codes]
        if len(names)
        else np.zeros(len(rt), dtype=bool)
    )
    # cudaMemcpyAsync to/from pageable host memory synchronises with its stream.
    ev = b.events
    if "correlation" in rt.columns and "correlation" in ev.columns and len(ev):
        marker = shipped("runtime.toml")["pageable_copy_marker"]
        codes_ev, texts = codes_and_texts(ev["name"])  # matched once per distinct name (-1: none)
        pageable = np.array([marker in t for t in texts] + [False], dtype=bool)[codes_ev]
        if pageable.any():
            corrs = set(ev.loc[pageable, "correlation"].tolist())
            hit = hit | rt["correlation"].isin(corrs).to_numpy(dtype=bool)
    r = rt.loc[hit]
    w0, w1 = b.window
    r = r[(r["ts"] >= w0) & (r["ts"] <= w1)]
    if len(r) == 0:
        return pd.DataFrame(columns=cols)
    out = pd.DataFrame(
        {
            "ts": r["ts"].to_numpy(dtype=float),
            "end": (r["ts"] + r["dur"]).to_numpy(dtype=float),
            "pid_code": pid_codes(r["pid"] if "pid" in r.columns else [""] * len(r), pid_table),
            "correlation": r["correlation"].to_numpy() if "correlation" in r.columns else -1,
        }
    )
    return out
