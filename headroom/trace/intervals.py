"""Which range holds each point: nested profiler ranges, resolved with sorted arrays.

The innermost range of a point is the last one to hold it when ranges are laid over the points
outermost first (by start, longer first), inner ranges over outer ones; found for all points at once
with vectorised jumps (`containing_range`), not a loop over the ranges. The outermost range is one
binary search over the top-level ranges.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headroom.trace.codes import factorized


def containing_range(starts: np.ndarray, ends: np.ndarray, points: np.ndarray, outermost: bool = False) -> np.ndarray:
    """For each point, the index of the innermost (or outermost) range holding it; -1 if none.

    Ranges must nest properly (as profiler ranges on one thread do).
    """
    out = np.full(len(points), -1, dtype=np.int64)
    if len(starts) == 0 or len(points) == 0:
        return out
    order = _outer_first(starts, ends)
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
    # Painted in that order over the sorted points, each range over the points it holds ([lo, hi) of
    # positions), the last range to paint a point is its answer: the last range k with lo[k] <= pos
    # and hi[k] > pos. lo never decreases with k, so that is the last k <= k*(pos) (the last range
    # starting at or before pos) with hi[k] > pos, found on the chain k*, up[k*], up[up[k*]], ...
    # (up: the previous range with a larger hi): the ranges skipped between two links never reach
    # further than the later one. No assumption on nesting; a loop over the ranges before.
    p_order = np.argsort(points, kind="stable")
    sorted_pts = points[p_order]
    lo = np.searchsorted(sorted_pts, starts[order], side="left")
    hi = np.searchsorted(sorted_pts, ends[order], side="right")
    hit = hi > lo
    ids, lo, hi = order[hit], lo[hit], hi[hit]
    if len(ids) == 0:
        return out
    up = previous_greater(hi)
    k = np.searchsorted(lo, np.arange(len(points)), side="right") - 1
    todo = np.flatnonzero(k >= 0)
    while len(todo):
        todo = todo[hi[k[todo]] <= todo]  # the range at k ended before this point: go up the chain
        k[todo] = up[k[todo]]
        todo = todo[k[todo] >= 0]
    out[p_order] = np.where(k >= 0, ids[np.maximum(k, 0)], -1)
    return out


def _outer_first(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Ranges outer ones first: by start, longer first among equal starts. Profiler ranges on a thread
    rarely share a start (none on the benchmark shapes) and come nearly in order: one stable sort then,
    the second key only when starts repeat."""
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    if len(s) > 1 and (bool((s[1:] == s[:-1]).any()) or bool(np.isnan(s[-1]))):
        order = np.lexsort((-(ends - starts), starts))
    return order


def previous_greater(values: np.ndarray) -> np.ndarray:
    """For each i, the last j < i with values[j] > values[i], or -1. By pointer jumping: a candidate
    that is not larger is replaced by its own candidate (nothing between them is larger than it), so
    each round about doubles the distance skipped; vectorised rounds, no loop over the elements."""
    cand = np.arange(len(values), dtype=np.int64) - 1
    todo = np.flatnonzero(cand >= 0)
    while len(todo):
        todo = todo[values[cand[todo]] <= values[todo]]
        cand[todo] = cand[cand[todo]]
        todo = todo[cand[todo] >= 0]
    return cand


def codes_and_texts(values) -> tuple[np.ndarray, list[str]]:
    """Codes into the distinct values' texts (-1: missing): a category's own codes, else one factorization."""
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        return values.cat.codes.to_numpy().astype(np.int64), [str(v) for v in values.cat.categories]
    if isinstance(values, (pd.Series, np.ndarray)) and values.dtype.kind in "biu":
        # Integers (devices, streams, ids) have no missing value and one text each: factorized as they are,
        # not boxed into 10^5 Python ints first (benchmarks/projection_steps.py).
        codes, uniques = pd.factorize(np.asarray(values), sort=False)
        return codes.astype(np.int64), [str(u) for u in uniques.tolist()]
    codes, uniques = factorized(np.asarray(values, dtype=object))
    return codes, [str(u) for u in uniques]


def thread_codes(pid, tid, table: dict[tuple[str, str], int]) -> np.ndarray:
    """Each (pid, tid) pair's code in `table`, which maps the pair's text (new pairs are added); -1
    where either is missing (no thread: it matches none).

    Threads compare as text: tables keep them as categories of strings, points may carry them as
    objects or numbers. Done per distinct pair: a trace has a handful of threads and 10^6 events."""
    if len(pid) == 0:
        return np.zeros(0, dtype=np.int64)
    pc, pt = codes_and_texts(pid)
    tc, tt = codes_and_texts(tid)
    width = len(tt) + 1
    combined = (pc + 1) * width + (tc + 1)
    size = (len(pt) + 1) * width
    if size <= 4 * len(combined) + 1024:  # few distinct pairs possible: a lookup table, no sort
        present = np.zeros(size, dtype=bool)
        present[combined] = True
        pairs = np.flatnonzero(present)
        inverse = None
    else:
        pairs, inverse = np.unique(combined, return_inverse=True)
    mapped = np.array(
        [
            -1
            if q // width == 0 or q % width == 0
            else table.setdefault((pt[q // width - 1], tt[q % width - 1]), len(table))
            for q in pairs.tolist()
        ],
        dtype=np.int64,
    )
    if inverse is None:
        lookup = np.full(size, -1, dtype=np.int64)
        lookup[pairs] = mapped
        return lookup[combined]
    return mapped[inverse.reshape(-1)]


def groups_of(codes: np.ndarray) -> dict[int, np.ndarray]:
    """Row positions (ascending) of each code."""
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    cuts = np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1
    return {int(codes[part[0]]): part for part in np.split(order, cuts)} if len(codes) else {}


def ranges_on_threads(ranges: pd.DataFrame, pid, tid, points: np.ndarray, outermost: bool = False) -> np.ndarray:
    """Row position in `ranges` (columns pid, tid, ts, dur) of the innermost (or outermost) range
    on each point's own thread that holds it; -1 if none. `pid`, `tid`: the points' threads
    (arrays, or Series: a categorical one is read by its codes)."""
    out = np.full(len(points), -1, dtype=np.int64)
    if len(ranges) == 0 or len(points) == 0:
        return out
    table: dict[tuple[str, str], int] = {}
    r_groups = groups_of(thread_codes(ranges["pid"], ranges["tid"], table))
    p_groups = groups_of(thread_codes(pid, tid, table))
    ts = ranges["ts"].to_numpy(dtype=float)
    end = ts + ranges["dur"].to_numpy(dtype=float)
    pts = np.asarray(points, dtype=float)
    for code, p_idx in p_groups.items():
        r_idx = r_groups.get(code) if code >= 0 else None
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
