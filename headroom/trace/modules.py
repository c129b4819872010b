"""Which nn.Module each kernel (or CPU op) ran for, in the forward and in the backward pass.

Module ranges come from `headroom profile` (``headroom/module <path> (<Class>)``, one per
call, headroom/profile/modules.py) or from torch.profiler's ``with_modules=True``
(``nn.Module: <Class>_<n>`` python_function events, nested into paths).

* Forward: the innermost module range on the launching thread that holds the launch.
* Backward: autograd runs a backward op (``MmBackward0``, ...) on its own thread, outside
  every module range. Kineto links it to the forward op that created its autograd node
  with a ``fwdbwd`` flow (s at the forward op, f at the backward op); where a trace has no
  such flows, the backward op's ``Sequence number`` names the forward op (the latest-starting
  forward op with that number on the one forward thread that has it: the op that created the
  node, or one that holds it). A kernel launched inside a linked backward op gets the module of
  that forward op. (Uses `Trace.flows`, the linked pairs, and the cpu table's `sequence`,
  `fwd_thread` and `inputs` columns where the loader provides them.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headroom.trace.codes import factorized
from headroom.trace.intervals import containing_range, groups_of, nested_self_times, ranges_on_threads, thread_codes
from headroom.trace.ranges import MODULE_PREFIX, MODULE_RANGE_PREFIX, parse_module_range
from headroom.trace.tables import Trace, texts_at

STACK_SEP = "/"


@dataclass
class ModuleColumns:
    """Per point: innermost module path and class, the classes of every module holding it
    (outermost first, '/'-joined), and whether it ran in a backward op linked to a forward op."""

    module: np.ndarray
    module_type: np.ndarray
    module_stack: np.ndarray
    backward: np.ndarray


def nesting_paths(ranges: pd.DataFrame, names: np.ndarray) -> np.ndarray:
    """Dotted paths of nested ranges on each thread (for ``nn.Module:`` events, which name one level)."""
    paths = np.empty(len(ranges), dtype=object)
    ts_all = ranges["ts"].to_numpy(dtype=float)
    end_all = ts_all + ranges["dur"].to_numpy(dtype=float)
    for _, idx in ranges.groupby(["pid", "tid"], observed=True, sort=False).indices.items():
        order = idx[np.lexsort((-(end_all[idx] - ts_all[idx]), ts_all[idx]))]
        stack: list[tuple[float, str]] = []
        for k in order:
            while stack and stack[-1][0] < ts_all[k]:
                stack.pop()
            paths[k] = f"{stack[-1][1]}.{names[k]}" if stack else names[k]
            stack.append((end_all[k], paths[k]))
    return paths


def module_ranges(trace: Trace) -> pd.DataFrame:
    """Every module call in the trace: pid, tid, ts, dur, path, module_type, module_stack, inputs."""
    cpu = trace.cpu
    cols = ["pid", "tid", "ts", "dur"]
    ours = cpu[trace.cpu_names_start_with(MODULE_RANGE_PREFIX)]
    if len(ours):
        # parsed once per distinct name: a model calls the same modules step after step
        codes, uniques = factorized(ours["name"], use_na_sentinel=False)
        parsed = [parse_module_range(str(n)) for n in uniques.tolist()]
        out = ours[cols].copy()
        out["path"] = np.array([p for p, _ in parsed], dtype=object)[codes]
        out["module_type"] = np.array([t for _, t in parsed], dtype=object)[codes]
        out["inputs"] = ours["inputs"].astype(object).to_numpy() if "inputs" in ours.columns else ""
        out = out[out["path"] != ""]
    else:
        legacy = cpu[(cpu["cat"] == "python_function").to_numpy() & trace.cpu_names_start_with(MODULE_PREFIX)]
        names = legacy["name"].astype(str).str.slice(len(MODULE_PREFIX)).to_numpy(dtype=object)
        out = legacy[cols].copy()
        out["path"] = nesting_paths(legacy, names) if len(legacy) else np.array([], dtype=object)
        out["module_type"] = np.array([re.sub(r"_\d+$", "", n) for n in names], dtype=object)
        out["inputs"] = ""
    out = out.reset_index(drop=True)
    out["module_stack"] = _stacks(out["path"].to_numpy(dtype=object), out["module_type"].to_numpy(dtype=object))
    return out


def _stacks(paths: np.ndarray, types: np.ndarray) -> np.ndarray:
    """Classes of a module and of every recorded module above it (by path prefix), outermost first."""
    type_of: dict[str, str] = {}
    for p, t in zip(paths.tolist(), types.tolist()):
        type_of.setdefault(p, t)
    memo: dict[str, str] = {}
    for p in type_of:
        parts = p.split(".")
        chain = [type_of[q] for q in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if q in type_of]
        memo[p] = STACK_SEP.join(chain)
    return np.array([memo[p] for p in paths.tolist()], dtype=object)


def backward_links(trace: Trace) -> pd.DataFrame:
    """Backward ops with the forward op each ran for: pid, tid, ts, dur, fwd_pid, fwd_tid, fwd_ts, via.

    `via` says how the link was found: "flow" (Kineto's fwdbwd flow) or "sequence"."""
    ops = trace.cpu_ops()
    cols = ["pid", "tid", "ts", "dur"]
    empty = pd.DataFrame({c: [] for c in cols + ["fwd_pid", "fwd_tid", "fwd_ts", "via"]})
    if len(ops) == 0:
        return empty
    frames = []
    pairs = trace.flows
    linked = np.zeros(len(ops), dtype=bool)
    threads: dict[tuple[str, str], int] = {}  # (pid, tid) text -> code: threads are joined as codes
    op_thread = thread_codes(ops["pid"], ops["tid"], threads)
    op_ts = ops["ts"].to_numpy(dtype=float)

    def link(rows: np.ndarray, fwd_pid: np.ndarray, fwd_tid: np.ndarray, fwd_ts: np.ndarray, via: str) -> None:
        frames.append(
            pd.DataFrame(
                {
                    **{c: ops[c].iloc[rows].to_numpy() for c in cols},
                    "fwd_pid": fwd_pid,
                    "fwd_tid": fwd_tid,
                    "fwd_ts": fwd_ts,
                    "via": via,
                }
            )
        )

    if len(pairs):
        # Kineto writes the flow end at the backward op's own start.
        match = _first_match(
            op_thread,
            op_ts,
            thread_codes(pairs["end_pid"], pairs["end_tid"], threads),
            pairs["end_ts"].to_numpy(dtype=float),
        )
        rows = np.flatnonzero(match >= 0)
        if len(rows):
            pair = match[rows]
            linked[rows] = True
            link(
                rows,
                texts_at(pairs["start_pid"], pair),
                texts_at(pairs["start_tid"], pair),
                pairs["start_ts"].to_numpy(dtype=float)[pair],
                "flow",
            )
    if "sequence" in ops.columns and "fwd_thread" in ops.columns:
        seq = ops["sequence"].to_numpy()
        fwd_thread = ops["fwd_thread"].to_numpy()
        has = np.array([isinstance(v, (int, np.integer)) and v >= 0 for v in seq]) if seq.dtype == object else seq >= 0
        bwd = has & (fwd_thread > 0) & ~linked
        fwd = has & (fwd_thread <= 0)
        if bwd.any() and fwd.any():
            rows, fwd_row, fwd_ts = _by_sequence(seq, op_thread, op_ts, bwd, fwd)
            if len(rows):
                link(rows, texts_at(ops["pid"], fwd_row), texts_at(ops["tid"], fwd_row), fwd_ts, "sequence")
    if not frames:
        return empty
    return pd.concat(frames, ignore_index=True)


def _by_sequence(
    seq: np.ndarray, op_thread: np.ndarray, op_ts: np.ndarray, bwd: np.ndarray, fwd: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The backward ops (rows of `bwd`) whose sequence number names a forward op (only numbers that one forward
    thread holds do; the latest op with it): their rows, the forward ops' rows, and their starts."""
    cand = pd.DataFrame(
        {"sequence": seq[fwd], "thread": op_thread[fwd], "fwd_ts": op_ts[fwd], "fwd_row": np.flatnonzero(fwd)}
    )
    n_threads = cand.groupby("sequence")["thread"].nunique()
    single = n_threads.index[n_threads == 1]
    cand = cand[cand["sequence"].isin(single)].sort_values("fwd_ts").drop_duplicates("sequence", keep="last")
    keys = cand["sequence"].to_numpy()
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    rows = np.flatnonzero(bwd)
    at = np.minimum(np.searchsorted(sorted_keys, seq[rows]), len(keys) - 1) if len(keys) else None
    found = (sorted_keys[at] == seq[rows]) if at is not None else np.zeros(len(rows), dtype=bool)
    if not found.any() or at is None:
        return rows[:0], rows[:0], np.zeros(0)
    rows, pick = rows[found], order[at[found]]
    return rows, cand["fwd_row"].to_numpy()[pick], cand["fwd_ts"].to_numpy()[pick]


def _first_match(thread: np.ndarray, ts: np.ndarray, key_thread: np.ndarray, key_ts: np.ndarray) -> np.ndarray:
    """For each (thread, ts), the position of the first key with the same thread code (>= 0) and the
    same time, or -1: a join on both, per thread by binary search."""
    out = np.full(len(ts), -1, dtype=np.int64)
    keys = groups_of(key_thread)
    for code, rows in groups_of(thread).items():
        k = keys.get(code)
        if code < 0 or k is None:
            continue
        order = k[np.argsort(key_ts[k], kind="stable")]  # equal times: the first key first
        sorted_ts = key_ts[order]
        at = np.minimum(np.searchsorted(sorted_ts, ts[rows], side="left"), len(order) - 1)
        same = sorted_ts[at] == ts[rows]
        out[rows[same]] = order[at[same]]
    return out


def attribute_modules(
    trace: Trace,
    pid: np.ndarray | pd.Series,
    tid: np.ndarray | pd.Series,
    ts: np.ndarray,
    ranges: pd.DataFrame | None = None,
    links: pd.DataFrame | None = None,
) -> ModuleColumns:
    """Module path, class, enclosing classes and backward flag for points (pid, tid, ts) on CPU threads."""
    n = len(ts)
    ranges = module_ranges(trace) if ranges is None else ranges
    links = backward_links(trace) if links is None else links
    fwd = ranges_on_threads(ranges, pid, tid, ts)
    bwd = ranges_on_threads(links, pid, tid, ts)
    backward = bwd >= 0
    which = fwd.copy()
    if backward.any() and len(ranges):
        # A module range inside the backward op (recomputation under activation checkpointing)
        # is the more specific answer; otherwise the module of the forward op.
        inside = backward & (fwd >= 0)
        if inside.any():
            inside[inside] = (
                ranges["ts"].to_numpy(dtype=float)[fwd[inside]] >= links["ts"].to_numpy(dtype=float)[bwd[inside]]
            )
        use_link = backward & ~inside
        lk = links.iloc[bwd[use_link]]
        which[use_link] = ranges_on_threads(
            ranges, lk["fwd_pid"].to_numpy(), lk["fwd_tid"].to_numpy(), lk["fwd_ts"].to_numpy(dtype=float)
        )
    ok = which >= 0
    module = np.full(n, "", dtype=object)
    module_type = np.full(n, "", dtype=object)
    stack = np.full(n, "", dtype=object)
    if ok.any():
        module[ok] = ranges["path"].to_numpy(dtype=object)[which[ok]]
        module_type[ok] = ranges["module_type"].to_numpy(dtype=object)[which[ok]]
        stack[ok] = ranges["module_stack"].to_numpy(dtype=object)[which[ok]]
    return ModuleColumns(module=module, module_type=module_type, module_stack=stack, backward=backward)


def module_calls(ranges: pd.DataFrame, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """The module calls that start inside a profiled step (`steps`: ts, end; None: every call,
    for a whole-trace analysis), as kernels belong to the step that launched them: path, module_type, module_stack, inputs,
    pid, tid, ts, dur (CPU time of the call, its children included) and self_us (less the
    time of the module calls directly inside it)."""
    cols = ["path", "module_type", "module_stack", "inputs", "pid", "tid", "ts", "dur", "self_us"]
    if len(ranges) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if i < 6 else float) for i, c in enumerate(cols)})
    out = ranges.assign(self_us=nested_self_times(ranges)[0])
    if steps is None:
        return out[cols].reset_index(drop=True)
    starts = ranges["ts"].to_numpy(dtype=float)
    inside = containing_range(steps["ts"].to_numpy(dtype=float), steps["end"].to_numpy(dtype=float), starts) >= 0
    return out.loc[inside, cols].reset_index(drop=True)
