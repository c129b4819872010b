"""Link every GPU activity to the CPU-side context that launched it.

kernel/memcpy/memset --correlation--> runtime/driver launch (cudaLaunchKernel,
cuLaunchKernel, cudaGraphLaunch, hipExtModuleLaunchKernel, ...) --External id-->
innermost cpu_op; and, by time containment on the launching thread: the
top-level op, the innermost record_function/NVTX range, the nn.Module path
(when the trace has `nn.Module:` python_function events) and the ProfilerStep.

All lookups are vectorised with sorted arrays: nested ranges are resolved by
assigning, outermost first, each range's label to the launch points it
contains, so inner ranges overwrite outer ones (and the reverse order yields
the outermost range).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headroom.trace.ranges import FRAME_PREFIX, MODULE_PREFIX, PROFILER_STEP_PREFIX
from headroom.trace.tables import Trace, starts_with


def containing_range(starts: np.ndarray, ends: np.ndarray, points: np.ndarray,
                     outermost: bool = False) -> np.ndarray:
    """For each point, the index of the innermost (or outermost) range holding it; -1 if none.

    Ranges must nest properly (as profiler ranges on one thread do).
    """
    out = np.full(len(points), -1, dtype=np.int64)
    if len(starts) == 0 or len(points) == 0:
        return out
    # Outer ranges first: earlier start, then longer duration.
    order = np.lexsort((-(ends - starts), starts))
    if outermost:
        # Top-level ranges start after everything before them ended; they are
        # disjoint, so one binary search per point finds the one that holds it.
        s, e = starts[order], ends[order]
        prev_end = np.maximum.accumulate(np.concatenate([[-np.inf], e[:-1]]))
        top = s >= prev_end
        s, e, ids = s[top], e[top], order[top]
        i = np.searchsorted(s, points, side="right") - 1
        ok = (i >= 0) & (points <= e[np.maximum(i, 0)])
        out[ok] = ids[i[ok]]
        return out
    p_order = np.argsort(points, kind="stable")
    sorted_pts = points[p_order]
    lo = np.searchsorted(sorted_pts, starts[order], side="left")
    hi = np.searchsorted(sorted_pts, ends[order], side="right")
    hit = hi > lo
    assigned = np.full(len(points), -1, dtype=np.int64)
    for r, a, b in zip(order[hit].tolist(), lo[hit].tolist(), hi[hit].tolist()):
        assigned[a:b] = r
    out[p_order] = assigned
    return out


def _labels_on_threads(ranges: pd.DataFrame, points: pd.DataFrame, outermost: bool = False) -> np.ndarray:
    """Label (range name) of the innermost/outermost range on the point's own thread."""
    result = np.full(len(points), "", dtype=object)
    if len(ranges) == 0 or len(points) == 0:
        return result
    names = ranges["name"].astype(str).to_numpy(dtype=object)
    r_groups = ranges.groupby(["pid", "tid"], observed=True, sort=False).indices
    p_groups = points.groupby(["launch_pid", "launch_tid"], observed=True, sort=False).indices
    ts = ranges["ts"].to_numpy()
    end = ts + ranges["dur"].to_numpy()
    pts = points["launch_ts"].to_numpy()
    for key, p_idx in p_groups.items():
        r_idx = r_groups.get(key)
        if r_idx is None:
            continue
        hit = containing_range(ts[r_idx], end[r_idx], pts[p_idx], outermost)
        ok = hit >= 0
        result[p_idx[ok]] = names[r_idx[hit[ok]]]
    return result


def _module_paths(modules: pd.DataFrame) -> pd.DataFrame:
    """Full nn.Module path for every module range, from nesting on its thread."""
    paths = np.empty(len(modules), dtype=object)
    for _, idx in modules.groupby(["pid", "tid"], observed=True, sort=False).indices.items():
        sub = modules.iloc[idx]
        order = np.lexsort((-sub["dur"].to_numpy(), sub["ts"].to_numpy()))
        stack: list[tuple[float, str]] = []
        ts = sub["ts"].to_numpy()
        end = ts + sub["dur"].to_numpy()
        names = sub["name"].astype(str).str.slice(len(MODULE_PREFIX)).to_numpy(dtype=object)
        for k in order:
            while stack and stack[-1][0] < ts[k]:
                stack.pop()
            path = f"{stack[-1][1]}.{names[k]}" if stack else names[k]
            paths[idx[k]] = path
            stack.append((end[k], path))
    out = modules.copy()
    out["name"] = paths
    return out


def attribute_kernels_to_ops(trace: Trace) -> pd.DataFrame:
    """One row per GPU activity with its launch and CPU-side context.

    Adds: launch_name, launch_ts, launch_dur, launch_pid, launch_tid, op,
    top_op, annotation, module, step (-1 outside every ProfilerStep).
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
    gpu["launch_name"] = gpu["launch_name"].fillna("")
    gpu["launch_pid"] = gpu["launch_pid"].astype(object).fillna("")
    gpu["launch_tid"] = gpu["launch_tid"].astype(object).fillna("")

    cpu = trace.cpu
    ops = cpu[cpu["cat"] == "cpu_op"]
    annotations = cpu[cpu["cat"] == "user_annotation"]
    annotations = annotations[~starts_with(annotations["name"], PROFILER_STEP_PREFIX)]
    modules = cpu[cpu["cat"] == "python_function"]
    modules = modules[starts_with(modules["name"], MODULE_PREFIX)]

    # Innermost op: the launch's External id names it directly (Kineto sets it
    # to the enclosing record function); fall back to containment.
    ext = gpu["launch_external_id"].where(gpu["launch_external_id"].notna(), gpu["external_id"])
    known = ops[ops["external_id"] != -1]
    by_ext = known.drop_duplicates("external_id").set_index("external_id")["name"]
    op = ext.map(by_ext) if len(by_ext) else pd.Series(np.nan, index=gpu.index)
    op = op.astype(object).to_numpy(copy=True)
    missing = pd.isna(op) & launched
    if missing.any():
        op[missing] = _labels_on_threads(ops, gpu.loc[missing])
    op = np.where(pd.isna(op), "", op)
    points = gpu.loc[launched]
    gpu["op"] = op

    top = np.full(len(gpu), "", dtype=object)
    top[launched] = _labels_on_threads(ops, points, outermost=True)
    gpu["top_op"] = np.where(top == "", gpu["op"].to_numpy(), top)

    ann = np.full(len(gpu), "", dtype=object)
    ann[launched] = _labels_on_threads(annotations, points)
    gpu["annotation"] = ann

    mod = np.full(len(gpu), "", dtype=object)
    if len(modules):
        mod[launched] = _labels_on_threads(_module_paths(modules), points)
    gpu["module"] = mod

    # Steps are time ranges of the whole process (the backward runs on
    # autograd threads): assign by launch time. A GPU activity whose launch is
    # not in the trace was either launched before recording began (its
    # correlation precedes every recorded launch's, or it started before the
    # first one: e.g. the warm-up step's work still running) and belongs to no
    # step, or its runtime event was not recorded: that one is placed by its
    # GPU start time, and counted by `unlaunched_warning`.
    steps = trace.steps
    when = np.where(launched, gpu["launch_ts"].to_numpy(), gpu["ts"].to_numpy())
    when[before_recording(gpu, trace.launches) & ~launched] = np.nan
    idx = containing_range(steps["ts"].to_numpy(), steps["end"].to_numpy(), when)
    gpu["step"] = np.where(idx >= 0, steps["step"].to_numpy()[np.maximum(idx, 0)], -1) if len(steps) else -1
    return gpu.drop(columns=["launch_external_id"])


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


def cpu_op_self_times(trace: Trace) -> pd.DataFrame:
    """CPU ops and record_function ranges with their self time (duration minus direct
    children), for traces without GPU activity.

    Columns: name, pid, tid, ts, dur, end, self_us, top_op, step.
    """
    cpu = trace.cpu
    # record_function ranges (e.g. `gloo:all_reduce`) hold time too; ProfilerStep and
    # headroom's own phase/block ranges (`headroom/forward`, ...) are frames, not work.
    frame = starts_with(cpu["name"], PROFILER_STEP_PREFIX) | starts_with(cpu["name"], FRAME_PREFIX)
    keep = (cpu["cat"] == "cpu_op").to_numpy() | ((cpu["cat"] == "user_annotation").to_numpy() & ~frame)
    ops = cpu[keep].reset_index(drop=True)
    self_us = ops["dur"].to_numpy(copy=True)
    top = ops["name"].to_numpy(dtype=object, copy=True)
    ts_all = ops["ts"].to_numpy()
    end_all = ts_all + ops["dur"].to_numpy()
    for _, idx in ops.groupby(["pid", "tid"], observed=True, sort=False).indices.items():
        order = idx[np.lexsort((-(end_all[idx] - ts_all[idx]), ts_all[idx]))]
        stack: list[int] = []
        for k in order:
            while stack and end_all[stack[-1]] <= ts_all[k]:
                stack.pop()
            if stack:
                self_us[stack[-1]] -= end_all[k] - ts_all[k]
                top[k] = top[stack[0]]
            stack.append(k)
    out = ops[["name", "pid", "tid", "ts", "dur"]].copy()
    out["end"] = end_all
    out["self_us"] = np.maximum(self_us, 0.0)
    out["top_op"] = top
    steps = trace.steps
    idx = containing_range(steps["ts"].to_numpy(), steps["end"].to_numpy(), ts_all)
    out["step"] = np.where(idx >= 0, steps["step"].to_numpy()[np.maximum(idx, 0)], -1) if len(steps) else -1
    return out
