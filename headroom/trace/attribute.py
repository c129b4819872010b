"""Link every GPU activity to the CPU-side context that launched it.

kernel/memcpy/memset --correlation--> runtime/driver launch (cudaLaunchKernel,
cuLaunchKernel, cudaGraphLaunch, hipExtModuleLaunchKernel, ...) --External id-->
innermost cpu_op; and, by time containment on the launching thread: the
top-level op, the innermost record_function/NVTX range, the ProfilerStep and
the nn.Module (headroom/trace/modules.py: module ranges, and for backward
kernels the module of the forward op autograd ran them for), and the phase
(forward, backward or optimizer: headroom/trace/phase.py).

All lookups are vectorised with sorted arrays (headroom/trace/intervals.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headroom.trace.intervals import containing_range, nested_self_times, ranges_on_threads
from headroom.trace.modules import attribute_modules
from headroom.trace.phases import event_phases
from headroom.trace.ranges import FRAME_PREFIX, MODULE_RANGE_PREFIX, PROFILER_STEP_PREFIX
from headroom.trace.tables import Trace, texts_at

__all__ = ["attribute_kernels_to_ops", "containing_range", "cpu_op_self_times"]


def _labels_on_threads(ranges: pd.DataFrame, pid: pd.Series, tid: pd.Series, ts: np.ndarray,
                       outermost: bool = False) -> np.ndarray:
    """Label (range name) of the innermost/outermost range on the point's own thread."""
    result = np.full(len(ts), "", dtype=object)
    if len(ranges) == 0 or len(ts) == 0:
        return result
    idx = ranges_on_threads(ranges, pid, tid, ts, outermost)
    ok = idx >= 0
    result[ok] = texts_at(ranges["name"], idx[ok])
    return result


def attribute_kernels_to_ops(trace: Trace, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per GPU activity with its launch and CPU-side context.

    Adds: launch_name, launch_ts, launch_dur, launch_pid, launch_tid, op,
    top_op, annotation, module, module_type, module_stack, phase, step (-1
    outside every step). `steps` (step, ts, end): the ranges that count as steps,
    by default the trace's ProfilerStep ranges.
    """
    gpu = trace.gpu.copy()
    gpu["name"] = gpu["name"].astype(str).astype(object)
    gpu["kind"] = gpu["kind"].astype(str).astype(object)
    gpu["end"] = gpu["ts"] + gpu["dur"]
    launches = trace.launches
    launches = launches[launches["correlation"] != -1]
    launches = launches.drop_duplicates("correlation", keep="first")
    link = launches[["correlation", "name", "ts", "dur", "pid", "tid", "external_id"]].rename(columns={
        "name": "launch_name", "ts": "launch_ts", "dur": "launch_dur", "pid": "launch_pid",
        "tid": "launch_tid", "external_id": "launch_external_id"})
    link["launch_name"] = link["launch_name"].astype(str).astype(object)
    if len(gpu) and gpu["correlation"].dtype != link["correlation"].dtype:
        gpu["correlation"] = gpu["correlation"].astype(object)
        link["correlation"] = link["correlation"].astype(object)
    gpu = gpu.merge(link, on="correlation", how="left")
    launched = gpu["launch_ts"].notna().to_numpy()
    # The launching threads as the launch table's categories (read by their codes) for the lookups below.
    thread_pid, thread_tid = gpu["launch_pid"], gpu["launch_tid"]
    gpu["launch_name"] = gpu["launch_name"].fillna("")
    gpu["launch_pid"] = gpu["launch_pid"].astype(object).fillna("")
    gpu["launch_tid"] = gpu["launch_tid"].astype(object).fillna("")

    cpu = trace.cpu
    ops = trace.cpu_ops()
    annotations = cpu[(cpu["cat"] == "user_annotation").to_numpy()
                      & ~trace.cpu_names_start_with(PROFILER_STEP_PREFIX, MODULE_RANGE_PREFIX)]

    # Innermost op: the launch's External id names it directly (Kineto sets it
    # to the enclosing record function); fall back to containment.
    ext = gpu["launch_external_id"].where(gpu["launch_external_id"].notna(), gpu["external_id"])
    op, named = _names_by_external_id(ops, ext.to_numpy())
    missing = ~named & launched
    if missing.any():
        op[missing] = _labels_on_threads(ops, thread_pid[missing], thread_tid[missing],
                                         gpu["launch_ts"].to_numpy(dtype=float)[missing])
    gpu["op"] = op
    pid, tid, when = thread_pid[launched], thread_tid[launched], gpu["launch_ts"].to_numpy(dtype=float)[launched]

    top = np.full(len(gpu), "", dtype=object)
    top[launched] = _labels_on_threads(ops, pid, tid, when, outermost=True)
    gpu["top_op"] = np.where(top == "", gpu["op"].to_numpy(), top)

    ann = np.full(len(gpu), "", dtype=object)
    ann[launched] = _labels_on_threads(annotations, pid, tid, when)
    gpu["annotation"] = ann

    columns = {k: np.full(len(gpu), "", dtype=object) for k in ("module", "module_type", "module_stack")}
    backward = np.zeros(len(gpu), dtype=bool)
    if launched.any():
        m = attribute_modules(trace, pid, tid, when)
        for k in columns:
            columns[k][launched] = getattr(m, k)
        backward[launched] = m.backward
    for k, v in columns.items():
        gpu[k] = v
    gpu["phase"] = event_phases(gpu["op"].to_numpy(dtype=object), gpu["top_op"].to_numpy(dtype=object),
                                gpu["annotation"].to_numpy(dtype=object), backward)

    # Steps are time ranges of the whole process (the backward runs on
    # autograd threads): assign by launch time. A GPU activity whose launch is
    # not in the trace was either launched before recording began (its
    # correlation precedes every recorded launch's, or it started before the
    # first one: e.g. the warm-up step's work still running) and belongs to no
    # step, or its runtime event was not recorded: that one is placed by its
    # GPU start time, and counted by `unlaunched_warning`.
    steps = trace.steps if steps is None else steps
    when = np.where(launched, gpu["launch_ts"].to_numpy(), gpu["ts"].to_numpy())
    when[before_recording(gpu, trace.launches) & ~launched] = np.nan
    idx = containing_range(steps["ts"].to_numpy(), steps["end"].to_numpy(), when)
    gpu["step"] = np.where(idx >= 0, steps["step"].to_numpy()[np.maximum(idx, 0)], -1) if len(steps) else -1
    return gpu.drop(columns=["launch_external_id"])


def _names_by_external_id(ops: pd.DataFrame, ext: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The name of the first op with each External id ("" where none has it), and where one has."""
    out = np.full(len(ext), "", dtype=object)
    named = np.zeros(len(ext), dtype=bool)
    ids = ops["external_id"].to_numpy()
    known = np.flatnonzero(ids != -1)
    if not len(known) or not len(ext):
        return out, named
    if ext.dtype.kind not in "iuf" or ids.dtype.kind not in "iu":     # ids beyond 64 bits: one lookup each
        by_id = dict(zip(ids[known][::-1].tolist(), ops["name"].iloc[known[::-1]].astype(str).tolist()))
        found = [by_id.get(e) for e in ext.tolist()]
        named = np.array([f is not None for f in found], dtype=bool)
        out[named] = [f for f in found if f is not None]
        return out, named
    keys, first = np.unique(ids[known], return_index=True)     # sorted ids; each one's first op
    keys_cmp = keys.astype(float) if ext.dtype.kind == "f" else keys
    at = np.minimum(np.searchsorted(keys_cmp, ext), len(keys) - 1)
    named = keys_cmp[at] == ext
    if named.any():
        out[named] = texts_at(ops["name"], known[first[at[named]]])
    return out, named


def before_recording(gpu: pd.DataFrame, launches: pd.DataFrame) -> np.ndarray:
    """GPU activities launched before recording began: their correlation precedes every recorded
    launch's (CUPTI numbers launches in order), or they started on the GPU before the first recorded
    launch."""
    corr = launches["correlation"].to_numpy()
    corr = corr[corr != -1] if corr.dtype != object else np.array([c for c in corr if c != -1], dtype=object)
    if not len(corr) or not len(gpu):
        return np.zeros(len(gpu), dtype=bool)
    own = gpu["correlation"].to_numpy()
    first_launch = float(launches["ts"].min())
    return ((own != -1) & (own < corr.min())) | (gpu["ts"].to_numpy() < first_launch)


def unlaunched_warning(events: pd.DataFrame, trace: Trace) -> str | None:
    """One line counting the GPU activities of `events` (attributed) placed by their GPU time: their
    launch is not in the trace, and they were not launched before recording began."""
    if "launch_ts" not in events or not len(events):
        return None
    alone = events["launch_ts"].isna().to_numpy() & ~before_recording(events, trace.launches)
    if not alone.any():
        return None
    n, us = int(alone.sum()), float(events["dur"].to_numpy()[alone].sum())
    return (f"{n:,} of {len(events):,} GPU activities ({us:,.0f} of {float(events['dur'].sum()):,.0f} us) have no "
            f"launch event in the trace; they are placed in steps by their GPU start time")


def cpu_op_self_times(trace: Trace, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """CPU ops and record_function ranges with their self time (duration minus direct
    children), for traces without GPU activity.

    Columns: name, pid, tid, ts, dur, end, self_us, top_op, step.
    """
    cpu = trace.cpu
    # record_function ranges (e.g. `gloo:all_reduce`) hold time too; ProfilerStep and
    # headroom's own phase/block/module ranges (`headroom/forward`, ...) are frames, not work.
    frame = trace.cpu_names_start_with(PROFILER_STEP_PREFIX, FRAME_PREFIX)
    keep = ((cpu["cat"] == "cpu_op").to_numpy() | (cpu["cat"] == "user_annotation").to_numpy()) & ~frame
    ops = cpu[keep].reset_index(drop=True)
    self_us, outermost = nested_self_times(ops)
    top = ops["name"].to_numpy(dtype=object)[outermost]
    ts_all = ops["ts"].to_numpy()
    end_all = ts_all + ops["dur"].to_numpy()
    out = ops[["name", "pid", "tid", "ts", "dur"]].copy()
    out["end"] = end_all
    out["self_us"] = np.maximum(self_us, 0.0)
    out["top_op"] = top
    steps = trace.steps if steps is None else steps
    idx = containing_range(steps["ts"].to_numpy(), steps["end"].to_numpy(), ts_all)
    out["step"] = np.where(idx >= 0, steps["step"].to_numpy()[np.maximum(idx, 0)], -1) if len(steps) else -1
    return out
