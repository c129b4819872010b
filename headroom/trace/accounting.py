"""Time accounting over classified GPU events: totals, busy/idle/wall, and per-category,
per-kernel, per-op and per-step sums.

`total` adds every event's duration (work done, counted per stream); `busy` is
the union of intervals per device (time the GPU had anything running); an
event's `wall_us` is its share of busy time when overlapping streams split each
instant evenly, so category wall shares add up to busy time and never double count.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headroom.trace.codes import factorized


def overlap_shares(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each interval's share of the union: every instant is split evenly among the intervals active then.

    sum(result) == union length. Vectorised: with F(t) = integral of 1/active(t),
    an interval's share is F(end) - F(start).
    """
    n = len(starts)
    if n == 0:
        return np.zeros(0)
    t = np.concatenate([starts, ends]).astype(np.float64)
    delta = np.concatenate([np.ones(n), -np.ones(n)])
    order = np.argsort(t, kind="stable")
    t_sorted = t[order]
    active = np.cumsum(delta[order])[:-1]
    seg = np.diff(t_sorted)
    rate = np.where(active > 0.5, 1.0 / np.maximum(active, 1.0), 0.0)
    F = np.concatenate([[0.0], np.cumsum(seg * rate)])
    pos = np.empty(2 * n, dtype=np.int64)
    pos[order] = np.arange(2 * n)
    return F[pos[n:]] - F[pos[:n]]


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    e = np.maximum.accumulate(ends[order])
    # A new block starts where an interval begins after everything before it ended.
    prev_end = np.concatenate([[-np.inf], e[:-1]])
    new_block = s > prev_end
    block_id = np.cumsum(new_block) - 1
    block_start = s[new_block]
    block_end = np.zeros(len(block_start))
    np.maximum.at(block_end, block_id, e)
    return float(np.sum(block_end - block_start))


def add_wall_shares(events: pd.DataFrame) -> pd.DataFrame:
    """Add `wall_us`: each event's share of its device's busy time."""
    shares = np.zeros(len(events))
    for _, idx in events.groupby("device", sort=False).indices.items():
        shares[idx] = overlap_shares(events["ts"].to_numpy()[idx], events["end"].to_numpy()[idx])
    events = events.copy(deep=False)  # copy-on-write: the caller's frame keeps its columns, none copied
    events["wall_us"] = shares
    return events


def busy_per_device(events: pd.DataFrame) -> dict[int, float]:
    return {
        dev: union_length(events["ts"].to_numpy()[idx], events["end"].to_numpy()[idx])
        for dev, idx in events.groupby("device", sort=False).indices.items()
    }


def _longest_first(table: pd.DataFrame, name: str) -> pd.DataFrame:
    """Rows by time, longest first; ties by name, so tables do not depend on event order in the file."""
    return table.sort_values(["us", name], ascending=[False, True], kind="stable").reset_index(drop=True)


def category_table(events: pd.DataFrame, total_us: float, wall_capacity_us: float) -> pd.DataFrame:
    g = events.groupby("category", sort=False).agg(
        us=("dur", "sum"), wall_us=("wall_us", "sum"), count=("dur", "size"), addressable=("addressable", "first")
    )
    g = g.reset_index().rename(columns={"category": "name"})
    g["fraction"] = g["us"] / total_us if total_us > 0 else 0.0
    g["wall_fraction"] = g["wall_us"] / wall_capacity_us if wall_capacity_us > 0 else 0.0
    g = _longest_first(g, "name")
    return g[["name", "us", "fraction", "wall_us", "wall_fraction", "addressable", "count"]]


def _per_key(events: pd.DataFrame, key: str) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """Integer codes of `key` (factorised once), its distinct values, and per-code sums."""
    codes, uniques = factorized(events[key])
    dur = events["dur"].to_numpy()
    addr = events["addressable"].to_numpy(dtype=bool)
    n = len(uniques)
    sums = pd.DataFrame(
        {
            "us": np.bincount(codes, weights=dur, minlength=n),
            "count": np.bincount(codes, minlength=n),
            "addressable_us": np.bincount(codes, weights=np.where(addr, dur, 0.0), minlength=n),
        }
    )
    return codes, np.asarray(uniques, dtype=object), sums


def _dominant(codes: np.ndarray, values: pd.Series, dur: np.ndarray, n: int) -> np.ndarray:
    """For each code, the value of `values` that accounts for most of its time."""
    vcodes, vuniques = factorized(values)
    pair = codes.astype(np.int64) * (len(vuniques) + 1) + vcodes
    pairs, inv = np.unique(pair, return_inverse=True)
    t = np.bincount(inv.reshape(-1), weights=dur)
    order = np.lexsort((-t, pairs // (len(vuniques) + 1)))
    first = np.unique(pairs[order] // (len(vuniques) + 1), return_index=True)[1]
    best = pairs[order][first]
    out = np.empty(n, dtype=object)
    out[best // (len(vuniques) + 1)] = np.asarray(vuniques, dtype=object)[best % (len(vuniques) + 1)]
    return out


def kernel_table(events: pd.DataFrame) -> pd.DataFrame:
    codes, names, g = _per_key(events, "name")
    dur = events["dur"].to_numpy()
    g["name"] = names
    g["category"] = _dominant(codes, events["category"], dur, len(names))
    g["op"] = _dominant(codes, events["op"], dur, len(names))
    g["addressable"] = g["addressable_us"] > 0
    g = _longest_first(g, "name")
    return g[["name", "category", "addressable", "us", "count", "op"]]


def op_table(events: pd.DataFrame) -> pd.DataFrame:
    ev = events.assign(op=events["op"].where(events["op"] != "", "(no op)"))
    codes, ops, g = _per_key(ev, "op")
    g["op"] = ops
    g["category"] = _dominant(codes, ev["category"], ev["dur"].to_numpy(), len(ops))
    g = _longest_first(g, "op")
    return g[["op", "category", "us", "count", "addressable_us"]]


def step_bounds(steps: pd.DataFrame, in_steps: pd.DataFrame, earlier: pd.DataFrame) -> pd.DataFrame:
    """Each step's time on the GPU timeline: from the later of its CPU start and the end of the
    GPU work that came before it, to the later of its CPU end and the end of its own GPU work.

    Eager PyTorch runs ahead of the GPU: when a profiled step starts on the CPU, the GPU can
    still be busy with work launched earlier (e.g. the profiler's warm-up step). That time is
    neither this step's work nor idle, so the step starts when the GPU is free of it.
    `earlier`: GPU activities not launched in any step. Adds `start`, `gpu_end` and `wall_us`.
    """
    out = steps.sort_values("ts").reset_index(drop=True).copy()
    by_step = in_steps.groupby("step", sort=False)["end"].max()
    first_ts = float(in_steps["ts"].min()) if len(in_steps) else np.inf
    before = earlier[earlier["ts"] < first_ts]
    prev_gpu_end = float(before["end"].max()) if len(before) else -np.inf
    starts, ends = [], []
    for s in out.itertuples(index=False):
        starts.append(max(float(s.ts), prev_gpu_end))
        own_end = float(by_step.get(s.step, -np.inf))
        ends.append(max(float(s.end), own_end))
        prev_gpu_end = max(prev_gpu_end, own_end)
    out["start"] = np.minimum(starts, ends)
    out["end"] = ends
    out["wall_us"] = out["end"] - out["start"]
    return out


def step_table(events: pd.DataFrame, bounds: pd.DataFrame) -> pd.DataFrame:
    by_step = events.groupby("step", sort=False).indices
    ts, end, dur = events["ts"].to_numpy(), events["end"].to_numpy(), events["dur"].to_numpy()
    dev, addr = events["device"].to_numpy(), events["addressable"].to_numpy(dtype=bool)
    rows = []
    for s in bounds.itertuples(index=False):
        idx = by_step.get(s.step, np.zeros(0, dtype=np.int64))
        busy = sum(union_length(ts[idx][dev[idx] == d], end[idx][dev[idx] == d]) for d in np.unique(dev[idx]))
        rows.append(
            (
                int(s.step),
                float(s.start),
                float(s.end),
                float(s.wall_us),
                float(busy),
                float(dur[idx].sum()),
                float(dur[idx][addr[idx]].sum()),
            )
        )
    return pd.DataFrame(rows, columns=["step", "start", "end", "wall_us", "busy_us", "total_us", "addressable_us"])
