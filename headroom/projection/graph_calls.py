"""The calls of kernels replayed from a CUDA graph, and what a change of launches per call makes of them.

A graph has no CPU launch per kernel, but every kernel node still costs the GPU a gap before it starts: on an
H100 the replayed llama-7b and gpt2-xl decode steps run their kernels back to back with a median gap of 0.42 us
(``node_gap_us``), against 1-3 us of kernel time for a small elementwise kernel. A candidate that runs a call in
fewer kernels removes those nodes and their gaps; a projection that only divides kernel times keeps them and
under-predicts (validate under graphs measured 1.108x where that projection said 1.087x, and even zero
kernel time said only 1.101x: docs/graphs.md, "Projections under graphs").

A call here is a run of selected kernels that follow each other on their stream (nothing else between them
in the replay) under one instance of the grouping range: the outermost module whose path or class the
selector's module atom matches (from the kernel's capture-time module path and class stack), else its op or
annotation. The change (:class:`~headroom.projection.cpu.CallChange` with ``graph``) splits a call's kernels
into the candidate's launches as eager calls do; the replay then drops the gaps inside each new kernel and
keeps those between them (:mod:`headroom.projection.replay_plan`). A candidate with more kernels than the
call had keeps the call's kernels and gains the extra nodes' gaps, each the trace's median gap between
back-to-back replayed kernels (``node_gap_us``), as idle GPU time before the call. The CPU side is
untouched: the graph launch is one call whatever it holds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headroom.projection.baseline import Baseline
from headroom.projection.calls import event_groupings, replayed_from_graph
from headroom.projection.cpu import Call, CallChange, split_events, text_keys
from headroom.projection.matching import label_predicate
from headroom.projection.problems import ProblemMap
from headroom.projection.replay_plan import BACK_TO_BACK_US, stream_predecessors
from headroom.projection.selectors import Selector
from headroom.projection.streams import stream_keys


def graph_calls(b: Baseline, selector: Selector, mask: np.ndarray, problems: ProblemMap) -> list[Call]:
    """The calls of the selected events (`mask`) a CUDA graph replayed; one per run of consecutive kernels of
    one grouping range instance on a stream."""
    ev = b.events
    idx = np.flatnonzero(mask & replayed_from_graph(ev))
    if len(idx) == 0:
        return []
    grouping = event_groupings(ev, idx, selector, problems)
    keys = [_call_key(ev, int(i), kind, pattern) for i, (kind, pattern) in zip(idx.tolist(), grouping)]
    prev, _ = stream_predecessors(b)
    kinds = ev["kind"].astype(str).to_numpy() if "kind" in ev.columns else np.full(len(ev), "kernel")
    pids, tids = text_keys(ev, "launch_pid"), text_keys(ev, "launch_tid")
    ts = ev["ts"].to_numpy(dtype=float)
    end = ts + ev["dur"].to_numpy(dtype=float)
    calls: list[Call] = []
    run: list[int] = []
    run_key: str | None = None
    # In stream order, a kernel joins the run when it follows the run's last kernel on its stream directly.
    for j in np.lexsort((ts[idx], stream_keys(ev)[idx])).tolist():
        i = int(idx[j])
        key = keys[j]
        if run and not (key is not None and key == run_key and prev[i] == run[-1]):
            calls.append(_call(run, run_key, pids, tids, ts, end, kinds))
            run = []
        run.append(i)
        run_key = key
    if run:
        calls.append(_call(run, run_key, pids, tids, ts, end, kinds))
    return calls


def graph_changes(calls: list[Call], launches: int, node_gap_us: float = 0.0) -> list[CallChange]:
    """The calls after the change, with no CPU side: their kernels split into `launches` new kernels, or, with
    more launches than kernels, the kernels kept and the extra nodes' gaps (`node_gap_us` each) added."""
    out = []
    n = max(launches, 0)
    for c in calls:
        if c.kernels == n or len(c.events) == 0:
            continue
        if c.kernels < n:
            added = (n - c.kernels) * node_gap_us
            if added > 0:
                kept = [c.events[i : i + 1] for i in range(len(c.events))]
                out.append(CallChange(c, n, 0.0, kept, [0.0] * len(kept), cpu=False, graph=True, added_gap_us=added))
            continue
        groups = split_events(c.events, n)
        out.append(CallChange(c, n, 0.0, groups, [0.0] * len(groups), cpu=False, graph=True))
    return out


def node_gap_us(b: Baseline) -> float:
    """The median gap between a replayed kernel and the one before it on its stream, where the two ran back
    to back (at most ``BACK_TO_BACK_US`` apart): what one more graph node costs the GPU (0 without replays)."""
    replayed = replayed_from_graph(b.events)
    prev, gap = stream_predecessors(b)
    ok = replayed & (prev >= 0) & replayed[np.maximum(prev, 0)] & (gap >= 0) & (gap <= BACK_TO_BACK_US)
    return float(np.median(gap[ok])) if ok.any() else 0.0


def _call(run: list[int], key: str | None, pids, tids, ts, end, kinds) -> Call:
    members = np.array(run, dtype=np.int64)
    return Call(
        str(pids[run[0]]),
        str(tids[run[0]]),
        "graph",
        key or "",
        float(ts[run[0]]),
        float(end[run[-1]]),
        members,
        int((kinds[members] == "kernel").sum()),
    )


def _call_key(ev: pd.DataFrame, i: int, kind: str, pattern: str) -> str | None:
    """The instance of the grouping range event `i` ran under (None: a kernel is its own call)."""
    if kind == "kernel":
        return None
    if kind in ("op", "annotation"):
        col = "top_op" if kind == "op" and "top_op" in ev.columns else kind
        v = str(ev[col].iat[i]) if col in ev.columns else ""
        return v or None
    path = str(ev["module"].iat[i]) if "module" in ev.columns else ""
    if not path:
        return None
    return _outermost_module(path, str(ev["module_stack"].iat[i]) if "module_stack" in ev.columns else "", pattern)


def _outermost_module(path: str, stack: str, pattern: str) -> str:
    """The shortest prefix of a module path whose path, or whose class in the stack, the atom matches (else the
    path itself). The stack holds the classes of the called modules from the root. A container's index is one
    level with its name where the container is not called (a ModuleList: `layers.3`), a level of its own where
    it is (a Sequential: `layer1`, then `0`); the reading whose depth is the stack's aligns the classes."""
    match = label_predicate("module", pattern)
    parts = path.split(".")
    merged: list[str] = []
    for p in parts:
        if p.isdigit() and merged:
            merged[-1] = f"{merged[-1]}.{p}"
        else:
            merged.append(p)
    classes = stack.split("/") if stack else []
    levels = parts if len(classes) == len(parts) and len(classes) != len(merged) else merged
    aligned = len(classes) == len(levels)
    for k in range(len(levels)):
        prefix = ".".join(levels[: k + 1])
        if match(prefix) or (aligned and match(classes[k])):
            return prefix
    return path
