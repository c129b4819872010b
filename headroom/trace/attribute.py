"""Link every GPU activity to the CPU-side context that launched it.

kernel/memcpy/memset --correlation--> runtime/driver launch (cudaLaunchKernel,
cuLaunchKernel, cudaGraphLaunch, hipExtModuleLaunchKernel, ...) --External id-->
innermost cpu_op; and, by time containment on the launching thread: the
top-level op, the innermost record_function/NVTX range, the ProfilerStep and
the nn.Module (headroom/trace/modules.py: module ranges, and for backward
kernels the module of the forward op autograd ran them for), and the phase
(forward, backward or optimizer: headroom/trace/phases.py); headroom/trace/context.py
looks these up. A kernel replayed from a CUDA graph takes the context of the launch that made its
node at capture (headroom/trace/graphs.py).

All lookups are vectorised with sorted arrays (headroom/trace/intervals.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headroom.trace.context import CONTEXT_COLUMNS, launch_context
from headroom.trace.graphs import attribute_replays
from headroom.trace.intervals import containing_range, nested_self_times
from headroom.trace.ranges import FRAME_PREFIX, PROFILER_STEP_PREFIX
from headroom.trace.tables import Trace

__all__ = ["CONTEXT_COLUMNS", "attribute_kernels_to_ops", "containing_range", "cpu_op_self_times", "launch_context"]


def attribute_kernels_to_ops(
    trace: Trace, steps: pd.DataFrame | None = None, graph_source: Trace | None = None
) -> pd.DataFrame:
    """One row per GPU activity with its launch and CPU-side context.

    Adds: launch_name, launch_ts, launch_dur, launch_pid, launch_tid, op,
    top_op, annotation, module, module_type, module_stack, phase, step (-1
    outside every step), graph (how a kernel replayed from a CUDA graph got its context: "" for one
    launched on its own; headroom/trace/graphs.py). `steps` (step, ts, end): the ranges that count as
    steps, by default the trace's ProfilerStep ranges. `graph_source`: another trace of the same step
    (eager, or holding the graph's capture) whose kernels give replayed kernels their context when this
    trace does not hold the capture.
    """
    gpu = trace.gpu.copy()
    gpu["name"] = gpu["name"].astype(str).astype(object)
    gpu["kind"] = gpu["kind"].astype(str).astype(object)
    gpu["end"] = gpu["ts"] + gpu["dur"]
    launches = trace.launches
    launches = launches[launches["correlation"] != -1]
    launches = launches.drop_duplicates("correlation", keep="first")
    link = launches[["correlation", "name", "ts", "dur", "pid", "tid", "external_id"]].rename(
        columns={
            "name": "launch_name",
            "ts": "launch_ts",
            "dur": "launch_dur",
            "pid": "launch_pid",
            "tid": "launch_tid",
            "external_id": "launch_external_id",
        }
    )
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

    ext = gpu["launch_external_id"].where(gpu["launch_external_id"].notna(), gpu["external_id"])
    context = launch_context(
        trace, thread_pid, thread_tid, gpu["launch_ts"].to_numpy(dtype=float), ext.to_numpy(), launched
    )
    for k, v in context.items():
        gpu[k] = v
    # Kernels replayed from a CUDA graph were launched by one cudaGraphLaunch: they take the context of
    # the launch that created their node at capture (headroom/trace/graphs.py).
    source = attribute_kernels_to_ops(graph_source) if graph_source is not None else None
    gpu = attribute_replays(gpu, trace, source, graph_source)

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
    return (
        f"{n:,} of {len(events):,} GPU activities ({us:,.0f} of {float(events['dur'].sum()):,.0f} us) have no "
        f"launch event in the trace; they are placed in steps by their GPU start time"
    )


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
