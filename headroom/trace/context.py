"""The CPU-side context of a launch call: the op, top-level op, annotation, module and phase it ran
under (headroom/trace/attribute.py gives every GPU activity the context of its launch;
headroom/trace/graphs.py gives a replayed kernel the context of the launch that made its node).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headroom.trace.compiled import fill_compiled
from headroom.trace.intervals import ranges_on_threads
from headroom.trace.modules import attribute_modules
from headroom.trace.phases import event_phases
from headroom.trace.ranges import MODULE_RANGE_PREFIX, PROFILER_STEP_PREFIX
from headroom.trace.tables import Trace, texts_at

__all__ = ["CONTEXT_COLUMNS", "launch_context", "labels_on_threads"]

# `compiled`: how work of torch.compile'd code got its module (headroom/trace/compiled.py; "" for other work).
CONTEXT_COLUMNS = ("op", "top_op", "annotation", "module", "module_type", "module_stack", "compiled", "phase")


def launch_context(
    trace: Trace, pid: pd.Series, tid: pd.Series, when: np.ndarray, ext: np.ndarray, launched: np.ndarray
) -> dict[str, np.ndarray]:
    """The CPU-side context of launch calls (one per point; `launched`: the points that have a launch
    call at `when` on thread (`pid`, `tid`)): innermost op (by the call's External id `ext`, else by
    containment), top-level op, innermost annotation, module columns (for compiled code, the module of the
    nodes it ran: headroom/trace/compiled.py) and phase (CONTEXT_COLUMNS)."""
    cpu = trace.cpu
    ops = trace.cpu_ops()
    annotations = cpu[
        (cpu["cat"] == "user_annotation").to_numpy()
        & ~trace.cpu_names_start_with(PROFILER_STEP_PREFIX, MODULE_RANGE_PREFIX)
    ]
    n = len(when)
    # Innermost op: the launch's External id names it directly (Kineto sets it
    # to the enclosing record function); fall back to containment.
    op, named = _names_by_external_id(ops, ext)
    missing = ~named & launched
    if missing.any():
        op[missing] = labels_on_threads(ops, pid[missing], tid[missing], when[missing])
    pid, tid, when = pid[launched], tid[launched], when[launched]
    top = np.full(n, "", dtype=object)
    top[launched] = labels_on_threads(ops, pid, tid, when, outermost=True)
    out = {"op": op, "top_op": np.where(top == "", op, top)}
    ann = np.full(n, "", dtype=object)
    ann[launched] = labels_on_threads(annotations, pid, tid, when)
    out["annotation"] = ann
    columns = {k: np.full(n, "", dtype=object) for k in ("module", "module_type", "module_stack")}
    backward = np.zeros(n, dtype=bool)
    compiled = np.full(n, "", dtype=object)
    if launched.any():
        m = attribute_modules(trace, pid, tid, when)
        inner = {k: getattr(m, k) for k in columns}
        compiled[launched] = fill_compiled(trace, pid, tid, when, op[launched], inner)
        for k in columns:
            columns[k][launched] = inner[k]
        backward[launched] = m.backward
    out.update(columns)
    out["compiled"] = compiled
    out["phase"] = event_phases(out["op"], out["top_op"], out["annotation"], backward)
    return out


def labels_on_threads(
    ranges: pd.DataFrame, pid: pd.Series, tid: pd.Series, ts: np.ndarray, outermost: bool = False
) -> np.ndarray:
    """Label (range name) of the innermost/outermost range on the point's own thread."""
    result = np.full(len(ts), "", dtype=object)
    if len(ranges) == 0 or len(ts) == 0:
        return result
    idx = ranges_on_threads(ranges, pid, tid, ts, outermost)
    ok = idx >= 0
    result[ok] = texts_at(ranges["name"], idx[ok])
    return result


def _names_by_external_id(ops: pd.DataFrame, ext: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The name of the first op with each External id ("" where none has it), and where one has."""
    out = np.full(len(ext), "", dtype=object)
    named = np.zeros(len(ext), dtype=bool)
    ids = ops["external_id"].to_numpy()
    known = np.flatnonzero(ids != -1)
    if not len(known) or not len(ext):
        return out, named
    if ext.dtype.kind not in "iuf" or ids.dtype.kind not in "iu":  # ids beyond 64 bits: one lookup each
        by_id = dict(zip(ids[known][::-1].tolist(), ops["name"].iloc[known[::-1]].astype(str).tolist()))
        found = [by_id.get(e) for e in ext.tolist()]
        named = np.array([f is not None for f in found], dtype=bool)
        out[named] = [f for f in found if f is not None]
        return out, named
    keys, first = np.unique(ids[known], return_index=True)  # sorted ids; each one's first op
    keys_cmp = keys.astype(float) if ext.dtype.kind == "f" else keys
    at = np.minimum(np.searchsorted(keys_cmp, ext), len(keys) - 1)
    named = keys_cmp[at] == ext
    if named.any():
        out[named] = texts_at(ops["name"], known[first[at[named]]])
    return out, named
