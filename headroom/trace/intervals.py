"""Which range holds each point: nested profiler ranges, resolved with sorted arrays.

Nested ranges are resolved by assigning, outermost first, each range's index to
the points it contains, so inner ranges overwrite outer ones (and the reverse
order yields the outermost range).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


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


def ranges_on_threads(ranges: pd.DataFrame, pid: np.ndarray, tid: np.ndarray, points: np.ndarray,
                      outermost: bool = False) -> np.ndarray:
    """Row position in `ranges` (columns pid, tid, ts, dur) of the innermost (or outermost) range
    on each point's own thread that holds it; -1 if none."""
    out = np.full(len(points), -1, dtype=np.int64)
    if len(ranges) == 0 or len(points) == 0:
        return out
    r_groups = ranges.groupby(["pid", "tid"], observed=True, sort=False).indices
    keys = pd.DataFrame({"pid": np.asarray(pid, dtype=object), "tid": np.asarray(tid, dtype=object)})
    p_groups = keys.groupby(["pid", "tid"], sort=False).indices
    # Thread keys compare as text: tables keep them as categories of strings.
    r_by_text = {(str(p), str(t)): idx for (p, t), idx in r_groups.items()}
    ts = ranges["ts"].to_numpy(dtype=float)
    end = ts + ranges["dur"].to_numpy(dtype=float)
    pts = np.asarray(points, dtype=float)
    for (p, t), p_idx in p_groups.items():
        r_idx = r_by_text.get((str(p), str(t)))
        if r_idx is None:
            continue
        hit = containing_range(ts[r_idx], end[r_idx], pts[p_idx], outermost)
        ok = hit >= 0
        out[p_idx[ok]] = r_idx[hit[ok]]
    return out


def nested_self_times(ranges: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """For ranges (pid, tid, ts, dur) that nest on each thread: each one's duration less its direct
    children's, and the row position of the outermost range holding it (itself if top-level)."""
    ts_all = ranges["ts"].to_numpy(dtype=float)
    end_all = ts_all + ranges["dur"].to_numpy(dtype=float)
    self_us = ranges["dur"].to_numpy(dtype=float).copy()
    outermost = np.arange(len(ranges))
    for _, idx in ranges.groupby(["pid", "tid"], observed=True, sort=False).indices.items():
        order = idx[np.lexsort((-(end_all[idx] - ts_all[idx]), ts_all[idx]))]
        stack: list[int] = []
        for k in order:
            while stack and end_all[stack[-1]] <= ts_all[k]:
                stack.pop()
            if stack:
                self_us[stack[-1]] -= end_all[k] - ts_all[k]
                outermost[k] = stack[0]
            stack.append(k)
    return np.maximum(self_us, 0.0), outermost
