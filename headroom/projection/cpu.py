"""The CPU side of a trace, as the replay needs it: the calls a speedup entry replaces (found by
``projection.calls``), what they cost on the CPU, and what a new launch costs.

A *call* is one instance of the selected region on the CPU timeline of the thread that launched its
kernels (docs/projection.md, "Calls"):

* ``module:`` selectors -- one nn.Module range instance (``nn.Module:`` python_function ranges, or
  ``headroom/module`` ranges), the outermost one on the thread whose path matches;
* ``annotation:`` selectors -- one ``record_function``/NVTX range instance, the innermost one (the
  selector matches the innermost range);
* ``op:`` selectors -- one op instance, the outermost op on the thread whose name matches;
* ``kernel:``, ``category:``, ``kind:``, ``phase:`` selectors -- one kernel (its launch).

A combined selector is grouped by its first non-negated atom of those kinds (module, then
annotation, then op); ``problem:`` selectors by the selector of the problem that matched each kernel.

A call's CPU *footprint* is what a replacement removes: the whole range when every kernel it
launches is selected, else the outermost ops inside it that launch only selected kernels (for a
kernel call: the outermost op around its launch that launches nothing else, else the launch call).
A footprint holding a blocking call (a synchronisation) is left unchanged.

A new launch costs what the trace's own *single-launch ops* cost on that thread: the median duration
of the top-level ops that launch exactly one kernel (``LaunchCost.op_us``), with the launch at the
median offset into such an op; the upper bound of the estimate charges only the median launch call
(``LaunchCost.launch_us``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd

from headroom.datafiles import shipped
from headroom.projection.baseline import Baseline
from headroom.trace.ranges import FRAME_PREFIX, PROFILER_STEP_PREFIX

# Runtime/driver calls that put work on a GPU (counted as launches even when their work is not in the window).
_LAUNCH_CALLS = re.compile(r"Launch|Memcpy|Memset", re.IGNORECASE)

MIN_SINGLE_LAUNCH_OPS = 5  # fewer on a thread: the estimate pools the process, then the trace
DEFAULT_LAUNCH_US = 5.0  # a launch call's cost when a trace records none

GROUPING_KINDS = ("module", "annotation", "op")  # range kinds, in the order a combined selector uses them


@dataclass(frozen=True)
class LaunchCost:
    """What one new launch costs on a thread's CPU timeline (profiled clock)."""

    op_us: float  # median duration of the top-level ops that launch exactly one kernel
    launch_us: float  # median duration of a launch call
    offset_us: float  # median time from such an op's start to its launch call
    n_ops: int  # single-launch ops the estimate rests on
    scope: str  # thread | process | trace | default
    records: float = 2.0  # median profiler records (ranges and runtime calls) inside such an op


@dataclass
class Call:
    """One instance of a selected region on the CPU timeline."""

    pid: str
    tid: str
    kind: str  # module | annotation | op | kernel
    label: str
    start: float
    end: float
    events: np.ndarray  # indices of its selected GPU events, in launch order
    kernels: int  # kernels among them (memcpy/memset not counted): launches before
    pieces: list[tuple[float, float]] = field(default_factory=list)  # CPU footprint, measured clock
    blocked: str = ""  # the blocking call inside the footprint ("" when the CPU side can change)
    records: int = 0  # profiler records (CPU ranges, runtime calls) inside the footprint
    # A kernel of a module/op/annotation selector launched outside every such range on its thread
    # (autograd's backward thread launches outside every module range): its launch stays as traced;
    # what an entry says of a call (launches, call_us, syncs) describes the calls with a range.
    orphan: bool = False

    @property
    def footprint_us(self) -> float:
        return float(sum(b - a for a, b in self.pieces))


@dataclass
class CallChange:
    """A call after the change: its footprint replaced by `launches` new launches carrying its kernels."""

    call: Call
    launches: int
    added_us: float  # CPU time of the new launches (profiled clock)
    groups: list[np.ndarray]  # the events each new kernel carries, in order
    launch_at: list[float]  # each new kernel's launch, us after the footprint starts (profiled clock)
    cpu: bool = True  # False: CPU unchanged, each new kernel launched at its group's last launch
    syncs: int = 0  # host synchronisations the call makes after the change (at its end)
    graph: bool = False  # kernels a CUDA graph replays: only the gaps inside each new kernel go (graph_calls.py)
    added_gap_us: float = 0.0  # graph: the nodes a call gains, as idle GPU time before its first kernel

    @property
    def removed_us(self) -> float:
        return self.call.footprint_us if self.cpu else 0.0


@dataclass
class CpuSide:
    """Per thread: CPU ranges and launch calls, sorted by start (built once per baseline)."""

    ranges: pd.DataFrame  # name, cat, pid, tid, ts, end (ProfilerStep excluded)
    launches: pd.DataFrame  # runtime calls that launch GPU work: pid, tid, ts, dur, end, correlation
    blocking: pd.DataFrame  # blocking runtime calls: pid, tid, ts, end, name
    costs: dict[tuple[str, str], LaunchCost]
    records: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)  # sorted starts of every record

    def cost(self, pid: str, tid: str) -> LaunchCost:
        return (
            self.costs.get((pid, tid))
            or self.costs.get(("", ""))
            or LaunchCost(DEFAULT_LAUNCH_US, DEFAULT_LAUNCH_US, 0.0, 0, "default")
        )

    def count_records(self, pid: str, tid: str, a: float, z: float) -> int:
        """Profiler records (CPU ranges and runtime calls) starting in [a, z] on a thread."""
        r = self.records.get((pid, tid))
        if r is None:
            return 0
        return int(np.searchsorted(r, z, "right") - np.searchsorted(r, a, "left"))


def text_keys(df: pd.DataFrame, col: str) -> np.ndarray:
    return df[col].astype(str).to_numpy(dtype=object) if col in df.columns else np.full(len(df), "", dtype=object)


def cpu_side(b: Baseline) -> CpuSide:
    """The CPU ranges and launch calls of a baseline, and each thread's launch cost."""
    cpu = b.cpu if b.cpu is not None else pd.DataFrame(columns=["name", "cat", "pid", "tid", "ts", "dur"])
    rt = (
        b.runtime if b.runtime is not None else pd.DataFrame(columns=["name", "pid", "tid", "ts", "dur", "correlation"])
    )
    names = cpu["name"].astype(str)
    keep = ~names.str.startswith(PROFILER_STEP_PREFIX).to_numpy(dtype=bool)
    ranges = pd.DataFrame(
        {
            "name": names.to_numpy(dtype=object)[keep],
            "cat": text_keys(cpu, "cat")[keep],
            "pid": text_keys(cpu, "pid")[keep],
            "tid": text_keys(cpu, "tid")[keep],
            "ts": cpu["ts"].to_numpy(dtype=float)[keep],
        }
    )
    ranges["end"] = ranges["ts"] + cpu["dur"].to_numpy(dtype=float)[keep]
    # Ops are cpu_op ranges other than headroom's own frames (its module ranges are cpu_op RecordFunctions).
    ranges["op"] = (ranges["cat"] == "cpu_op").to_numpy() & ~ranges["name"].astype(str).str.startswith(
        FRAME_PREFIX
    ).to_numpy()
    ev = b.events
    corrs = set(ev["correlation"].tolist()) if "correlation" in ev.columns else set()
    rt_names = rt["name"].astype(str)
    rt_corr = rt["correlation"].to_numpy() if "correlation" in rt.columns else np.full(len(rt), -1)
    is_launch = np.fromiter((c in corrs for c in rt_corr.tolist()), dtype=bool, count=len(rt)) | rt_names.str.contains(
        _LAUNCH_CALLS
    ).to_numpy(dtype=bool)
    base = pd.DataFrame(
        {
            "pid": text_keys(rt, "pid"),
            "tid": text_keys(rt, "tid"),
            "ts": rt["ts"].to_numpy(dtype=float),
            "dur": rt["dur"].to_numpy(dtype=float),
            "correlation": rt_corr,
            "name": rt_names.to_numpy(dtype=object),
        }
    )
    base["end"] = base["ts"] + base["dur"]
    launches = base[is_launch].sort_values("ts", kind="stable").reset_index(drop=True)
    names_rx = blocking_call_names()
    blocking = base[rt_names.map(lambda s: names_rx.fullmatch(s) is not None).to_numpy(dtype=bool)].reset_index(
        drop=True
    )
    side = CpuSide(ranges.sort_values("ts", kind="stable").reset_index(drop=True), launches, blocking, {})
    starts = pd.concat([ranges[["pid", "tid", "ts"]], base[["pid", "tid", "ts"]]])
    side.records = {
        k: np.sort(starts["ts"].to_numpy()[i]) for k, i in starts.groupby(["pid", "tid"], sort=False).indices.items()
    }
    side.costs = _launch_costs(side, b.window)
    return side


def top_level(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Mask of ranges (sorted by start) that no earlier range contains."""
    if len(ts) == 0:
        return np.zeros(0, dtype=bool)
    prev_end = np.maximum.accumulate(np.concatenate([[-np.inf], end[:-1]]))
    return ts >= prev_end


def _launch_costs(side: CpuSide, window: tuple[float, float]) -> dict[tuple[str, str], LaunchCost]:
    """Per thread, the median single-launch op and launch call (in the window); pooled where a thread has few."""
    r, la = side.ranges, side.launches
    ops = r[r["op"].to_numpy() & (r["ts"] >= window[0]).to_numpy() & (r["ts"] <= window[1]).to_numpy()]
    la_w = la[(la["ts"] >= window[0]).to_numpy() & (la["ts"] <= window[1]).to_numpy()]
    per: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    for key, idx in ops.groupby(["pid", "tid"], sort=False).indices.items():
        o = ops.iloc[idx].sort_values(["ts", "end"], ascending=[True, False], kind="stable")
        ts, end = o["ts"].to_numpy(), o["end"].to_numpy()
        top = top_level(ts, end)
        ts, end = ts[top], end[top]
        lt = la_w.loc[(la_w["pid"] == key[0]).to_numpy() & (la_w["tid"] == key[1]).to_numpy(), "ts"].to_numpy()
        lt = np.sort(lt)
        lo, hi = np.searchsorted(lt, ts, "left"), np.searchsorted(lt, end, "right")
        one = (hi - lo) == 1
        rec = side.records.get(key, np.zeros(0))
        n_rec = np.searchsorted(rec, end[one], "right") - np.searchsorted(rec, ts[one], "left")
        per[key] = (
            end[one] - ts[one],
            lt[lo[one]] - ts[one] if one.any() else np.zeros(0),
            la_w.loc[(la_w["pid"] == key[0]).to_numpy() & (la_w["tid"] == key[1]).to_numpy(), "dur"].to_numpy(),
            n_rec.astype(float),
        )

    def make(arrays: Sequence[np.ndarray], scope: str) -> LaunchCost:
        durs, offs, lds, recs = arrays
        launch_us = float(np.median(lds)) if len(lds) else DEFAULT_LAUNCH_US
        if len(durs) == 0:
            return LaunchCost(launch_us, launch_us, 0.0, 0, "default", 1.0)
        return LaunchCost(
            float(np.median(durs)), launch_us, float(np.median(offs)), int(len(durs)), scope, float(np.median(recs))
        )

    out: dict[tuple[str, str], LaunchCost] = {}
    all_d = [np.concatenate([v[i] for v in per.values()]) if per else np.zeros(0) for i in range(4)]
    out[("", "")] = make(all_d, "trace")
    by_pid: dict[str, list] = {}
    for (pid, _tid), v in per.items():
        by_pid.setdefault(pid, []).append(v)
    for (pid, tid), v in per.items():
        if len(v[0]) >= MIN_SINGLE_LAUNCH_OPS:
            out[(pid, tid)] = make(v, "thread")
            continue
        pooled = [np.concatenate([x[i] for x in by_pid[pid]]) for i in range(4)]
        if len(pooled[0]) >= MIN_SINGLE_LAUNCH_OPS:
            out[(pid, tid)] = make(pooled, "process")
        else:
            out[(pid, tid)] = out[("", "")]
    return out


@lru_cache(maxsize=1)
def blocking_call_names() -> re.Pattern:
    """The runtime/driver calls that block the CPU until GPU work is done (headroom/data/runtime.toml)."""
    return re.compile("|".join(f"(?:{p})" for p in shipped("runtime.toml")["blocking_calls"]))


# --- what a call becomes ------------------------------------------------------


def split_events(events: np.ndarray, n: int) -> list[np.ndarray]:
    """A call's events, in order, into the `n` new kernels that carry them (none for n = 0)."""
    return [g for g in np.array_split(events, n) if len(g)] if n > 0 else []


def change_calls(
    calls: list[Call],
    launches: int,
    side: CpuSide,
    bound: str = "estimate",
    per_record_us: float = 0.0,
    cpu_scale: float = 1.0,
    call_us: float | None = None,
    syncs: float | None = None,
    reference_call_us: float | None = None,
) -> list[CallChange]:
    """The calls after the change, for one CPU outcome of the estimate.

    ``estimate``: each new launch costs a single-launch op of the thread; ``high``: only a launch call;
    ``low``: the CPU side is unchanged and each new kernel is launched when the old work's last launch was;
    ``per_record``: as ``estimate``, but the profiler's overhead is `per_record_us` per record (range or
    runtime call) instead of a uniform clock speed `cpu_scale` -- the saving a uniform clock would give
    is replaced by ``(footprint - o x its records) - launches x (op - o x an op's records)``; ``high`` takes
    the larger of the two models' savings.
    `call_us` (the measured CPU time of one call after the change, unprofiled us) replaces the launches'
    cost in ``estimate`` (``call_us / cpu_scale`` on the profiled clock) and ``per_record`` (a saving of
    ``footprint - o x its records - call_us``), the new kernels launched evenly through the new
    footprint, the last one launch call before its end; ``high`` and ``low`` stay bounds that do not
    depend on it. With `call_us` every call changes (its CPU time is measured, whatever its kernel count).
    With `reference_call_us` too (the call before the change, measured in the same run: verify's two
    children, interleaved) only their ratio is taken, applied to each call's own time in this trace
    (``footprint x ratio`` on the profiled clock; per record, the footprint less its records' overhead
    x ratio): the machine and the moment verify ran on cancel, as the trace's calls carry this run's.
    Calls whose kernel count is already `launches` do not change otherwise; nor do calls with a blocking
    call inside, nor orphan kernels (``Call.orphan``). `syncs` (host synchronisations per call after the change,
    measured by verify): each
    changed call ends with that many waits for the GPU to finish everything queued (the replay's
    synthetic blocking calls), in every bound: it is a property of the new code, not a cost estimate.
    """
    out = []
    n_sync = int(round(syncs)) if syncs is not None and syncs > 0 else 0
    measured = call_us is not None and bound in ("estimate", "per_record")
    ratio = call_us / reference_call_us if call_us is not None and reference_call_us else None
    for c in calls:
        if (c.kernels == launches and call_us is None) or c.blocked or c.orphan or len(c.events) == 0:
            continue
        cost = side.cost(c.pid, c.tid)
        n = max(launches, 0)
        groups = split_events(c.events, n)
        per = cost.launch_us if bound == "high" else cost.op_us
        offset = 0.0 if bound == "high" else min(cost.offset_us, per)
        added = n * per
        if measured and call_us is not None:
            scale = cpu_scale if cpu_scale > 0 else 1.0
            added = c.footprint_us * ratio if ratio is not None else call_us / scale
            if bound == "per_record" and per_record_us > 0:
                before = c.footprint_us - per_record_us * c.records
                saved = before - (max(before, 0.0) * ratio if ratio is not None else call_us)
                added = max(c.footprint_us - saved / scale, 0.0)
            step = added / len(groups) if groups else 0.0
            at = [max((k + 1) * step - min(cost.launch_us, step), 0.0) for k in range(len(groups))]
            out.append(CallChange(c, n, added, groups, at, syncs=n_sync))
            continue
        if bound in ("per_record", "high") and per_record_us > 0 and cpu_scale > 0:
            # The replay scales CPU time by cpu_scale: express the per-record saving in profiled time.
            # (A new launch carries an op's records, or, at the high end, the launch call's one.)
            recs = 1.0 if bound == "high" else cost.records
            saved = (c.footprint_us - per_record_us * c.records) - n * max(per - per_record_us * recs, 0.0)
            if bound == "high":  # the larger of the two overhead models' savings
                saved = max(saved, cpu_scale * (c.footprint_us - added))
            added = max(c.footprint_us - saved / cpu_scale, 0.0)
        out.append(
            CallChange(
                c,
                n,
                added,
                groups,
                [min(k * per + offset, added) if added > 0 else 0.0 for k in range(len(groups))],
                cpu=bound != "low",
                syncs=n_sync,
            )
        )
    return out


def untouched_ops(b: Baseline, side: CpuSide, calls: list[Call]) -> dict[str, np.ndarray]:
    """Durations (profiled us) of the top-level ops on the calls' threads, in the window, outside every call:
    the CPU work a change of those calls does not touch, by op name."""
    r = side.ranges
    w0, w1 = b.window
    out: dict[str, list[np.ndarray]] = {}
    for pid, tid in sorted({(c.pid, c.tid) for c in calls}):
        o = r[
            r["op"].to_numpy()
            & (r["pid"] == pid).to_numpy()
            & (r["tid"] == tid).to_numpy()
            & (r["ts"] >= w0).to_numpy()
            & (r["end"] <= w1).to_numpy()
        ]
        o = o.sort_values(["ts", "end"], ascending=[True, False], kind="stable")
        ts, end = o["ts"].to_numpy(dtype=float), o["end"].to_numpy(dtype=float)
        top = top_level(ts, end)
        ts, end, names = ts[top], end[top], o["name"].astype(str).to_numpy(dtype=object)[top]
        inside = np.zeros(len(ts), dtype=bool)
        for c in calls:
            if (c.pid, c.tid) == (pid, tid):
                inside |= (ts < c.end) & (end > c.start)
        for n in dict.fromkeys(names[~inside].tolist()):
            sel = ~inside & (names == n)
            out.setdefault(n, []).append(end[sel] - ts[sel])
    return {n: np.concatenate(v) for n, v in out.items()}


def cpu_speed_ratio(base: dict[str, np.ndarray], other: dict[str, np.ndarray]) -> tuple[float, int, int]:
    """How much slower the CPU ran in `other` than in `base`, from the same untouched ops (`untouched_ops`):
    per op name in both, the ratio of its median durations; their median weighted by the op's count (the
    smaller of the two). Returns (ratio, names, ops); (1.0, 0, 0) when no op is in both."""
    rows = [
        (float(np.median(other[n])) / float(np.median(base[n])), min(len(base[n]), len(other[n])))
        for n in sorted(set(base) & set(other))
        if len(base[n]) and len(other[n]) and np.median(base[n]) > 0
    ]
    if not rows:
        return 1.0, 0, 0
    rows.sort()
    ratios = np.array([x for x, _ in rows])
    weights = np.cumsum([w for _, w in rows], dtype=float)
    return float(ratios[np.searchsorted(weights, weights[-1] / 2.0)]), len(rows), int(weights[-1])


def window_records(b: Baseline) -> int:
    """Profiler records in the window: CPU ranges (ProfilerStep excluded) and runtime/driver calls."""
    w0, w1 = b.window
    n = 0
    if b.cpu is not None and len(b.cpu):
        ts = b.cpu["ts"].to_numpy(dtype=float)
        step = b.cpu["name"].astype(str).str.startswith(PROFILER_STEP_PREFIX).to_numpy(dtype=bool)
        n += int(((ts >= w0) & (ts <= w1) & ~step).sum())
    if b.runtime is not None and len(b.runtime):
        ts = b.runtime["ts"].to_numpy(dtype=float)
        n += int(((ts >= w0) & (ts <= w1)).sum())
    return n
