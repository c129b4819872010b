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

import bisect
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from headroom.accounting import add_wall_shares, overlap_shares
from headroom.errors import UserError
from headroom.speedups import (Distribution, ProblemMap, Resolution, Speedup, load_problems,
                               parse_selector, resolve, select)

DEFAULT_QUANTILES = (0.25, 0.5, 0.75, 0.9)
BACK_TO_BACK_US = 4.0      # a gap this small after the previous event on the stream = it was queued
DEFAULT_LAUNCH_LATENCY_US = 5.0
PROFILER_OVERHEAD_WARN = 0.10  # warn when profiled steps are this much slower than unprofiled ones
MAX_STREAM_GAP_US = 50.0   # a queued event starting later than this after its predecessor waited on something else
SYNC_CALLS = re.compile(
    r"^(cuda|hip|cu)(Device|Stream|Event|Ctx)Synchronize$"
    r"|^(cudaMemcpy|cudaMemcpy2D|cudaMemcpy3D|hipMemcpy|hipMemcpyWithStream|hipMemcpy2D)$"
    r"|^cuMemcpy(DtoH|HtoD|DtoD)?(_v2)?$|^(cuda|hip)Free$|^cuMemFree(_v2)?$")
_MEMORY = "memory"
_COMM = "communication"


# --- the baseline a projection starts from ---------------------------------------------


@dataclass
class Baseline:
    """What the projections need from an analysed trace (or from a synthetic table in tests)."""

    events: pd.DataFrame
    wall_us: float
    window: tuple[float, float]
    num_steps: int = 1
    n_devices: int = 1
    mode: str = "gpu"
    source: str = ""
    runtime: pd.DataFrame | None = None   # runtime/driver calls: name, pid, tid, ts, dur, correlation
    syncs: pd.DataFrame | None = None     # cuda_sync events, when the trace has them
    step_end: float | None = None          # CPU end of the last ProfilerStep (the window may end there)
    manifest: dict = field(default_factory=dict)  # headroom profile's run manifest, when the trace has one

    @property
    def per_step_us(self) -> float:
        return self.wall_us / self.num_steps if self.num_steps else self.wall_us

    @classmethod
    def from_analysis(cls, a: Any) -> "Baseline":
        trace = getattr(a, "trace", None)
        runtime = getattr(trace, "launches", None) if trace is not None else None
        syncs = getattr(trace, "syncs", None) if trace is not None else None
        step_end = None
        if trace is not None and len(getattr(trace, "steps", ())):
            step_end = float(trace.steps["end"].max())
        return cls(events=a.events, wall_us=float(a.wall_us), window=tuple(a.window),
                   num_steps=int(a.num_steps), n_devices=int(getattr(a, "n_devices", 1) or 1),
                   mode=str(getattr(a, "mode", "gpu")), source=str(getattr(a, "source", "")),
                   runtime=runtime, syncs=syncs, step_end=step_end,
                   manifest=dict(getattr(a, "manifest", None) or {}))

    @classmethod
    def from_events(cls, events: pd.DataFrame, window: tuple[float, float] | None = None,
                    num_steps: int = 1, runtime: pd.DataFrame | None = None,
                    step_end: float | None = None) -> "Baseline":
        """A baseline from a plain events table (columns as in Analysis.events; `wall_us` added if absent)."""
        ev = events.copy()
        if "end" not in ev.columns:
            ev["end"] = ev["ts"] + ev["dur"]
        for col, default in (("device", 0), ("stream", 0), ("kind", "kernel"), ("category", "other"),
                             ("addressable", True)):
            if col not in ev.columns:
                ev[col] = default
        if "wall_us" not in ev.columns:
            ev = add_wall_shares(ev)
        if window is None:
            window = (float(ev["ts"].min()), float(ev["end"].max()))
        n_dev = max(int(ev["device"].nunique()), 1)
        return cls(events=ev.reset_index(drop=True), wall_us=float(window[1] - window[0]),
                   window=(float(window[0]), float(window[1])), num_steps=num_steps, n_devices=n_dev,
                   runtime=runtime, step_end=step_end)


def as_baseline(x: Any) -> Baseline:
    return x if isinstance(x, Baseline) else Baseline.from_analysis(x)


# --- breakdowns ------------------------------------------------------------------------


@dataclass
class Breakdown:
    """How the window's device time divides (summed over devices; fractions of wall x devices)."""

    capacity_us: float
    kernel_us: float
    memory_us: float
    communication_us: float
    idle_us: float

    def to_dict(self) -> dict[str, float]:
        cap = self.capacity_us
        f = (lambda v: v / cap if cap > 0 else 0.0)
        return {"capacity_us": self.capacity_us, "kernel_us": self.kernel_us, "memory_us": self.memory_us,
                "communication_us": self.communication_us, "idle_us": self.idle_us,
                "kernel_fraction": f(self.kernel_us), "memory_fraction": f(self.memory_us),
                "communication_fraction": f(self.communication_us), "idle_fraction": f(self.idle_us)}


def _buckets(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    cat = events["category"].astype(str).to_numpy() if "category" in events.columns \
        else np.full(len(events), "other", dtype=object)
    kind = events["kind"].astype(str).to_numpy() if "kind" in events.columns \
        else np.full(len(events), "kernel", dtype=object)
    mem = (cat == _MEMORY) | (kind == "memcpy") | (kind == "memset")
    comm = (cat == _COMM) & ~mem
    return mem, comm


def _breakdown(events: pd.DataFrame, shares: np.ndarray, window_us: float, n_devices: int) -> Breakdown:
    mem, comm = _buckets(events)
    busy = float(shares.sum())
    cap = window_us * n_devices
    m = float(shares[mem].sum())
    c = float(shares[comm].sum())
    return Breakdown(cap, busy - m - c, m, c, max(cap - busy, 0.0))


# --- projections -------------------------------------------------------------------------


@dataclass
class Projection:
    method: str          # "amdahl" | "replay"
    scenario: str        # "speedups" | "zero_time" | "win_rate_x_median" | "quantile_0.5" | "expected" | ...
    baseline_us: float
    projected_us: float
    num_steps: int
    breakdown: Breakdown
    factor: float | None = None   # the uniform factor applied, for single-factor scenarios
    note: str = ""

    @property
    def speedup(self) -> float:
        return self.baseline_us / self.projected_us if self.projected_us > 0 else math.inf

    @property
    def gain(self) -> float:
        """Fraction of the baseline time saved (the paper's "x% end-to-end")."""
        return 1.0 - self.projected_us / self.baseline_us if self.baseline_us > 0 else 0.0

    @property
    def saved_us(self) -> float:
        return self.baseline_us - self.projected_us

    @property
    def per_step_us(self) -> float:
        return self.projected_us / self.num_steps if self.num_steps else self.projected_us

    def to_dict(self) -> dict[str, Any]:
        d = {"method": self.method, "scenario": self.scenario, "projected_us": self.projected_us,
             "per_step_us": self.per_step_us, "speedup": self.speedup, "gain": self.gain,
             "saved_us": self.saved_us, "breakdown": self.breakdown.to_dict()}
        if self.factor is not None:
            d["factor"] = self.factor if math.isfinite(self.factor) else None
        if self.note:
            d["note"] = self.note
        return d


def _factor_array(b: Baseline, factors: np.ndarray | float | None, mask: np.ndarray | None) -> np.ndarray:
    n = len(b.events)
    if isinstance(factors, np.ndarray):
        if factors.shape != (n,):
            raise ValueError(f"factors has shape {factors.shape}, expected ({n},)")
        f = factors.astype(float)
    else:
        f = np.ones(n)
        if factors is not None:
            f[mask if mask is not None else slice(None)] = float(factors)
    if np.any(~(f > 0)):
        raise UserError("speedup factors must be > 0")
    return f


def amdahl(base: Any, factors: np.ndarray | float, mask: np.ndarray | None = None,
           scenario: str = "speedups") -> Projection:
    """``T' = T - sum t_i (1 - 1/s_i)`` per device (t_i = the event's wall share), idle held fixed."""
    b = as_baseline(base)
    f = _factor_array(b, factors, mask)
    ev = b.events
    wall = ev["wall_us"].to_numpy(dtype=float)
    saved = wall * (1.0 - 1.0 / f)
    devices = ev["device"].to_numpy() if "device" in ev.columns else np.zeros(len(ev))
    per_dev = pd.Series(saved).groupby(devices).sum() if len(ev) else pd.Series(dtype=float)
    max_saved_slowest = float(per_dev.min()) if len(per_dev) else 0.0
    # Each device finishes `saved_d` earlier; the window ends with the slowest device.
    projected = b.wall_us - (max_saved_slowest if len(per_dev) > 1 else float(saved.sum()))
    new_shares = wall - saved
    bd = _breakdown(ev, new_shares, projected, b.n_devices)
    uniform = float(f[f != 1.0][0]) if np.any(f != 1.0) and np.all(f[f != 1.0] == f[f != 1.0][0]) else None
    return Projection("amdahl", scenario, b.wall_us, projected, b.num_steps, bd, uniform)


# --- timeline replay -------------------------------------------------------------------------


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


def replay(base: Any, factors: np.ndarray | float | None = None, mask: np.ndarray | None = None,
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

    # Blocking synchronisations on the CPU (inside the window).
    syncs = _blocking_calls(b, pid_table)
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


def _blocking_calls(b: Baseline, pid_table: dict) -> pd.DataFrame:
    cols = ["ts", "end", "pid_code", "correlation"]
    rt = b.runtime
    if rt is None or len(rt) == 0 or "name" not in rt.columns:
        return pd.DataFrame(columns=cols)
    names = rt["name"].astype(str)
    hit = names.map(lambda s: SYNC_CALLS.match(s) is not None).to_numpy(dtype=bool).copy()
    # cudaMemcpyAsync to/from pageable host memory synchronises with its stream.
    ev = b.events
    if "correlation" in rt.columns and "correlation" in ev.columns and len(ev):
        pageable = ev["name"].astype(str).str.contains("Pageable", regex=False).to_numpy(dtype=bool)
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


def replay_projection(base: Any, factors: np.ndarray | float, mask: np.ndarray | None = None,
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


def replay_check(base: Any) -> dict[str, float]:
    """Replay with no change: how far the model is from the measured timeline (should be ~0)."""
    b = as_baseline(base)
    r = replay(b)
    if len(b.events) == 0:
        return {"max_abs_error_us": 0.0, "window_error_us": 0.0}
    err = np.abs(r.ts - b.events["ts"].to_numpy(dtype=float))
    return {"max_abs_error_us": float(np.nanmax(err)), "window_error_us": float(r.projected_us - b.wall_us),
            "launch_latency_us": r.launch_latency_us, "blocking_calls": r.n_syncs, "cross_stream_deps": r.n_deps}


# --- distributions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    factor: float      # applied uniformly to the selected events
    note: str = ""


def distribution_scenarios(dist: Distribution | None = None, win_rate: float | None = None,
                           median: float | None = None,
                           quantiles: Sequence[float] = DEFAULT_QUANTILES) -> list[Scenario]:
    """Uniform factors standing for a benchmark's results.

    * ``win_rate_x_median``: a fraction w of the selected time gets the median winning
      speedup m, the rest none: ``T' = T - w t (1 - 1/m)``, i.e. a uniform factor
      ``1 / (1 - w + w/m)`` (the paper's 8.63% for DLRM: w = 0.417, m = 1.552, t = 58.2%).
    * ``quantile_q``: every selected kernel at the q-quantile of the per-problem speedups
      (failures and losses count as 1.0: one keeps PyTorch's kernel).
    * ``expected``: each problem owning an equal share of the selected time: factor = 1 / mean(1/s).
    """
    out: list[Scenario] = []
    if dist is not None:
        if dist.n == 0:
            raise UserError(f"{dist.source or 'distribution'}: no results")
        w = dist.win_rate if win_rate is None else win_rate
        m = dist.median_win if median is None else median
    else:
        w, m = win_rate, median
    if w is not None or m is not None:
        if w is None or m is None:
            raise UserError("give both --win-rate and --median (or a results file)")
        if not (0.0 <= w <= 1.0) or math.isnan(w):
            raise UserError(f"win rate must be in [0, 1], got {w}")
        if not (m > 0) or math.isinf(m):
            raise UserError(f"median speedup must be finite and > 0, got {m}")
        out.append(Scenario("win_rate_x_median", 1.0 / (1.0 - w + w / m),
                            f"win rate {w:.3f} x median speedup {m:.3f}"))
    if dist is not None:
        e = dist.effective()
        for q in quantiles:
            if not 0.0 <= q <= 1.0:
                raise UserError(f"quantile must be in [0, 1], got {q}")
            out.append(Scenario(f"quantile_{q:g}", float(np.quantile(e, q)), f"q{q:g} of {dist.n} results"))
        out.append(Scenario("expected", float(1.0 / np.mean(1.0 / e)), f"harmonic mean of {dist.n} results"))
    return out


# --- the whole `project` answer ----------------------------------------------------------------


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


def baseline_breakdown(base: Any) -> Breakdown:
    b = as_baseline(base)
    return _breakdown(b.events, b.events["wall_us"].to_numpy(dtype=float), b.wall_us, b.n_devices)


def project(analysis: Any, entries: Sequence[Speedup] = (), distribution: Distribution | None = None,
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


def projection_table(results: Sequence[ProjectResult], labels: Sequence[str] | None = None,
                     scenario: str = "speedups") -> pd.DataFrame:
    """One row per workload: baseline and projected per-step time (ms) by method, for the projection chart."""
    rows = []
    for k, r in enumerate(results):
        label = labels[k] if labels else r.source
        row = {"workload": label, "baseline_ms": r.per_step_us / 1e3}
        for method in ("amdahl", "replay"):
            p = r.get(method, scenario)
            z = r.get(method, "zero_time")
            row[f"{method}_ms"] = p.per_step_us / 1e3 if p else np.nan
            row[f"{method}_gain"] = p.gain if p else np.nan
            row[f"{method}_zero_ms"] = z.per_step_us / 1e3 if z else np.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=["workload", "baseline_ms", "amdahl_ms", "amdahl_gain", "amdahl_zero_ms",
                                       "replay_ms", "replay_gain", "replay_zero_ms"])
