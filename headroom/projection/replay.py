"""Timeline replay: the trace's GPU streams re-run with the selected kernels shortened.

See :mod:`headroom.projection.project` for the model.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

import numpy as np
import pandas as pd

from headroom.datafiles import shipped
from headroom.projection.amdahl import Projection, _factor_array
from headroom.projection.baseline import Baseline, _breakdown, as_baseline
from headroom.trace.accounting import overlap_shares
from headroom.trace.analysis import Analysis

BACK_TO_BACK_US = 4.0      # a gap this small after the previous event on the stream = it was queued
DEFAULT_LAUNCH_LATENCY_US = 5.0
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


def _stream_keys(ev: pd.DataFrame) -> np.ndarray:
    dev = ev["device"].astype(str) if "device" in ev.columns else pd.Series("0", index=ev.index)
    st = ev["stream"].astype(str) if "stream" in ev.columns else pd.Series("0", index=ev.index)
    codes, _ = pd.factorize(dev + "/" + st)
    return codes


def _pid_codes(values: Iterable, table: dict) -> np.ndarray:
    out = []
    for v in values:
        key = "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
        out.append(table.setdefault(key, len(table)))
    return np.array(out, dtype=np.int64)


STREAM_WAIT_EVENT = "Stream Wait Event"  # Kineto's name for a CUPTI stream-wait-event sync record


def cross_stream_deps(events: pd.DataFrame, syncs: pd.DataFrame | None,
                      runtime: pd.DataFrame | None) -> np.ndarray:
    """For each event, the index of the event it waits on in another stream (-1 if none known).

    Uses Kineto ``cuda_sync`` "Stream Wait Event" records (traces taken with
    ``enable_cuda_sync_events``): columns ``stream`` (waiting stream), ``device``,
    ``ts``, ``wait_on_stream`` and ``wait_on_cuda_event_record_corr_id`` (the
    correlation of the cudaEventRecord call). The producer is the last event on
    the recorded stream launched before that cudaEventRecord; the consumer is
    the first event on the waiting stream that starts after the wait.
    """
    n = len(events)
    dep = np.full(n, -1, dtype=np.int64)
    if syncs is None or runtime is None or len(syncs) == 0 or n == 0:
        return dep
    need = {"stream", "ts", "wait_on_stream", "wait_on_cuda_event_record_corr_id"}
    if not need <= set(syncs.columns) or "correlation" not in events.columns:
        return dep
    if "name" in syncs.columns:  # "Event Sync", "Stream Synchronize", ... block the CPU, not a stream
        syncs = syncs[syncs["name"].astype(str) == STREAM_WAIT_EVENT]
    rec_ts = dict(zip(runtime["correlation"].tolist(), runtime["ts"].tolist()))
    stream = events["stream"].astype(str).to_numpy()
    ts = events["ts"].to_numpy(dtype=float)
    launch = events["launch_ts"].to_numpy(dtype=float) if "launch_ts" in events.columns else ts
    by_stream: dict[str, np.ndarray] = {}
    for s in np.unique(stream):
        idx = np.flatnonzero(stream == s)
        by_stream[s] = idx[np.argsort(ts[idx], kind="stable")]
    for row in syncs.itertuples(index=False):
        src, dst = str(row.wait_on_stream), str(row.stream)
        t_rec = rec_ts.get(row.wait_on_cuda_event_record_corr_id)
        if t_rec is None or src not in by_stream or dst not in by_stream or src == dst:
            continue
        p_idx = by_stream[src]
        launched = p_idx[launch[p_idx] <= t_rec]
        if len(launched) == 0:
            continue
        producer = launched[np.argmax(launch[launched])]
        c_idx = by_stream[dst]
        k = np.searchsorted(ts[c_idx], float(row.ts), side="left")
        if k < len(c_idx):
            consumer = c_idx[k]
            if dep[consumer] < 0 or ts[producer] > ts[dep[consumer]]:
                dep[consumer] = producer
    return dep


def _measured_timeline(b: Baseline) -> tuple:
    """What replay reads from the measured timeline, whatever the factors: launches, launching
    threads, each event's predecessor on its stream and cross-stream dependency with the measured
    gaps and lags, and the blocking CPU calls in the window. Computed once per baseline (`targets`
    replays one trace many times)."""
    key = (b.events, b.syncs, b.runtime, b.window)
    memo = b.__dict__.get("_measured_timeline")
    if memo is not None and all(a is k or (type(a) is tuple and a == k) for a, k in zip(memo[0], key)):
        return memo[1]
    ev = b.events
    n = len(ev)
    ts = ev["ts"].to_numpy(dtype=float)
    end = ts + ev["dur"].to_numpy(dtype=float)
    launch = ev["launch_ts"].to_numpy(dtype=float) if "launch_ts" in ev.columns else np.full(n, np.nan)
    has_launch = np.isfinite(launch)
    pid_table: dict = {}
    pids = _pid_codes(ev["launch_pid"].tolist() if "launch_pid" in ev.columns else [""] * n, pid_table)

    # Previous event on the same stream, and the measured gaps/lags.
    streams = _stream_keys(ev)
    order = np.lexsort((end, ts))
    prev = np.full(n, -1, dtype=np.int64)
    last: dict[int, int] = {}
    for i in order.tolist():
        s = streams[i]
        prev[i] = last.get(s, -1)
        last[s] = i
    gap = np.where(prev >= 0, ts - end[np.maximum(prev, 0)], np.inf)
    dep = cross_stream_deps(ev, b.syncs, b.runtime)
    dep_gap = np.where(dep >= 0, ts - end[np.maximum(dep, 0)], np.inf)
    lag = np.where(has_launch, ts - launch, 0.0)
    # Blocking synchronisations on the CPU (inside the window).
    syncs = _blocking_calls(b, pid_table)
    result = (launch, has_launch, pids, prev, gap, dep, dep_gap, lag, syncs)
    b.__dict__["_measured_timeline"] = (key, result)
    return result


def replay(base: Baseline | Analysis, factors: np.ndarray | float | None = None, mask: np.ndarray | None = None,
           back_to_back_us: float = BACK_TO_BACK_US, launch_latency_us: float | None = None,
           max_stream_gap_us: float = MAX_STREAM_GAP_US) -> ReplayResult:
    """Re-run the GPU timeline with each event's duration divided by its factor.

    See the module docstring for the model; returns the new start/end of every
    event and the projected window length.
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
    launch, has_launch, pids, prev, gap, dep, dep_gap, lag, syncs = _measured_timeline(b)
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

    n_sync = len(syncs)
    # Events sorted by measured end, to find what a sync waited for.
    by_end = np.argsort(end, kind="stable")
    end_sorted = end[by_end]

    # Merged sweep: events by measured start, syncs by measured end (syncs first on ties).
    keys = np.concatenate([ts, syncs["end"].to_numpy(dtype=float) if n_sync else np.zeros(0)])
    kind = np.concatenate([np.ones(n, dtype=np.int8), np.zeros(n_sync, dtype=np.int8)])
    idx = np.concatenate([np.arange(n), np.arange(n_sync)])
    sweep = np.lexsort((kind, keys))

    hist: dict[int, tuple[list[float], list[float]]] = {}
    max_late = 0.0
    max_shift = 0.0

    def delta(pid: int, t: float) -> float:
        h = hist.get(pid)
        if not h:
            return 0.0
        k = bisect.bisect_right(h[0], t) - 1
        return h[1][k] if k >= 0 else 0.0

    s_ts = syncs["ts"].to_numpy(dtype=float) if n_sync else np.zeros(0)
    s_end = syncs["end"].to_numpy(dtype=float) if n_sync else np.zeros(0)
    s_pid = syncs["pid_code"].to_numpy() if n_sync else np.zeros(0, dtype=np.int64)
    s_corr = syncs["correlation"].to_numpy() if n_sync else np.zeros(0)
    corr = ev["correlation"].to_numpy() if "correlation" in ev.columns else np.full(n, -1)

    # Plain lists: the sweep is a Python loop, and list indexing is much faster than numpy's.
    L_launch, L_lat, L_prev, L_g = launch.tolist(), lat.tolist(), prev.tolist(), g.tolist()
    L_dep, L_d, L_dur, L_end = dep.tolist(), d.tolist(), new_dur.tolist(), end.tolist()
    L_has, L_pid, L_ts = has_launch.tolist(), pids.tolist(), ts.tolist()
    ts2_l = [math.nan] * n
    end2_l = [math.nan] * n
    any_shift = False
    for j, i, k in zip(sweep.tolist(), idx[sweep].tolist(), kind[sweep].tolist()):
        if k == 1:
            if L_has[i]:
                a = L_launch[i]
                start = a + (delta(L_pid[i], a) if any_shift else 0.0) + L_lat[i]
            else:
                start = L_ts[i]
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
            ts2_l[i] = start
            e2 = start + L_dur[i]
            end2_l[i] = e2
            if e2 - L_end[i] > max_late:
                max_late = e2 - L_end[i]
        else:
            pid = int(s_pid[i])
            t0, t1 = s_ts[i], s_end[i]
            dl = delta(pid, t0)
            lo = np.searchsorted(end_sorted, t0 + min(dl, 0.0) - max_late, side="left")
            hi = np.searchsorted(end_sorted, t1, side="right")
            cand = by_end[lo:hi]
            cand = cand[(launch[cand] <= t0) | (corr[cand] == s_corr[i])] if len(cand) else cand
            g_meas = g_new = -math.inf
            for c in cand.tolist():
                e2 = end2_l[c]
                if e2 == e2:  # replayed already (not NaN)
                    if L_end[c] > g_meas:
                        g_meas = L_end[c]
                    if e2 > g_new:
                        g_new = e2
            wait = max(0.0, g_meas - t0)
            nowait = (t1 - t0) - wait
            new_end = nowait + max(t0 + dl, g_new)
            shift = new_end - t1
            h = hist.setdefault(pid, ([], []))
            h[0].append(t1)
            h[1].append(shift)
            max_shift = max(max_shift, abs(shift))
            any_shift = any_shift or shift != 0.0
    ts2 = np.array(ts2_l, dtype=float)
    end2 = np.array(end2_l, dtype=float)

    # The window ends at the later of the last GPU end and the last step's CPU end (shifted).
    w0, w1 = b.window
    cpu_end = b.step_end if b.step_end is not None else -np.inf
    if np.isfinite(cpu_end):
        main_pid = int(np.bincount(pids).argmax()) if len(pids) else 0
        cpu_end = cpu_end + delta(main_pid, cpu_end)
    new_w1 = max(float(np.nanmax(end2)), cpu_end)
    # Keep any part of the measured window the replay does not model (e.g. CPU work after the last step).
    old_model_end = max(float(end.max()), b.step_end if b.step_end is not None else -np.inf)
    new_w1 += max(w1 - old_model_end, 0.0)
    return ReplayResult(ts2, end2, new_w1, new_w1 - w0, float(launch_latency_us), n_sync,
                        int((dep >= 0).sum()), max_shift)


@lru_cache(maxsize=1)
def _blocking_call_names() -> re.Pattern:
    """The runtime/driver calls that block the CPU (headroom/data/runtime.toml)."""
    return re.compile("|".join(f"(?:{p})" for p in shipped("runtime.toml")["blocking_calls"]))


def _blocking_calls(b: Baseline, pid_table: dict) -> pd.DataFrame:
    cols = ["ts", "end", "pid_code", "correlation"]
    rt = b.runtime
    if rt is None or len(rt) == 0 or "name" not in rt.columns:
        return pd.DataFrame(columns=cols)
    names = rt["name"].astype(str)
    blocking = _blocking_call_names()
    hit = names.map(lambda s: blocking.fullmatch(s) is not None).to_numpy(dtype=bool).copy()
    # cudaMemcpyAsync to/from pageable host memory synchronises with its stream.
    ev = b.events
    if "correlation" in rt.columns and "correlation" in ev.columns and len(ev):
        marker = shipped("runtime.toml")["pageable_copy_marker"]
        pageable = ev["name"].astype(str).str.contains(marker, regex=False).to_numpy(dtype=bool)
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
        "pid_code": _pid_codes(r["pid"].tolist() if "pid" in r.columns else [""] * len(r), pid_table),
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
    bd = _breakdown(ev, shares, r.projected_us, b.n_devices)
    uniform = float(f[f != 1.0][0]) if np.any(f != 1.0) and np.all(f[f != 1.0] == f[f != 1.0][0]) else None
    return Projection("replay", scenario, b.wall_us, r.projected_us, b.num_steps, bd, uniform)


def replay_check(base: Baseline | Analysis) -> dict[str, float]:
    """Replay with no change: how far the model is from the measured timeline (should be ~0)."""
    b = as_baseline(base)
    r = replay(b)
    if len(b.events) == 0:
        return {"max_abs_error_us": 0.0, "window_error_us": 0.0}
    err = np.abs(r.ts - b.events["ts"].to_numpy(dtype=float))
    return {"max_abs_error_us": float(np.nanmax(err)), "window_error_us": float(r.projected_us - b.wall_us),
            "launch_latency_us": r.launch_latency_us, "blocking_calls": r.n_syncs, "cross_stream_deps": r.n_deps}

