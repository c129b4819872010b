"""The replay without replaced calls, solved a stream chain at a time between blocking calls.

Between two blocking calls no CPU clock moves, so each event's earliest start -- its launch on its
process's clock plus the launch latency, or its measured start when it has no launch -- is known for the
whole stretch ("segment"). On its stream an event then starts at the later of that and its predecessor's
end plus the gap between them:

    e_j = max(a_j, e_{j-1} + g_j) + d_j         (e: replayed end, a: earliest start, d: new duration)

With S_j the sum of g + d along the chain up to j this is u_j = max(a_j + d_j - S_j, u_{j-1}) for
u = e - S: a running maximum, which numpy computes in C (`maximum.accumulate`). A chain is a run of
events each of which follows the one before on its stream (the sweep's predecessor links); a segment
holds a piece of a few chains. A dependency on another stream's event (a recorded wait) is folded into
`a`; where producer and consumer would fall in one segment the segment is split before the consumer,
so every producer is solved before its consumer is. Blocking calls run between segments, one at a
time, through the caller's `on_sync` (they read the ends replayed so far and move a CPU clock).

The result equals the event-by-event sweep (:func:`headroom.projection.replay._replay`) up to rounding:
`a + d - S + S` is not bit for bit `max(...) + d`. Replays are in time relative to the window's start,
where a double resolves 1e-10 us (absolute Kineto times near 1.7e15 us resolve only 0.25 us).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

SWEEP_EVENT = 3  # the sweep's kind of an event (replay.py)
SWEEP_SYNC = 2  # ... and of a blocking call


@dataclass
class Chains:
    """What the solver reads that no factor changes (built once per replay plan)."""

    n: int
    chain_order: np.ndarray  # events by (chain, sweep position)
    chain_first: np.ndarray  # positions in chain_order where a chain starts
    chain_len: np.ndarray
    gap: np.ndarray  # in chain_order: the gap kept after the stream predecessor (0 at a chain's head)
    seg_order: np.ndarray  # events by (segment, chain, sweep position)
    steps: list  # ("seg", a, b, pieces, clocks, dep_local) or ("sync", sync index), in sweep order
    carry: np.ndarray  # per event in seg_order: its predecessor in an earlier segment, else -1
    dep_of: np.ndarray  # per event in seg_order: its producer on another stream, else -1
    # In seg_order: launch, has a launch, launch latency, measured start and end, process code, the gap
    # kept after the producer on another stream.
    launch: np.ndarray
    has_launch: np.ndarray
    lat: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    pids: np.ndarray
    dep_gap: np.ndarray


def _roots(prev: np.ndarray) -> np.ndarray:
    """Each event's chain head, following predecessor links by pointer jumping (log of the chain length)."""
    root = np.where(prev >= 0, prev, np.arange(len(prev)))
    while True:
        nxt = root[root]
        if np.array_equal(nxt, root):
            return root
        root = nxt


def build(
    sweep_idx: np.ndarray,
    sweep_kind: np.ndarray,
    prev: np.ndarray,
    dep: np.ndarray,
    launch: np.ndarray,
    has_launch: np.ndarray,
    lat: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    pids: np.ndarray,
    g: np.ndarray,
    d: np.ndarray,
) -> Chains:
    """The chains and segments of a sweep (events and blocking calls in the order the sweep visits them),
    and the sweep's per-event values in their orders. g: the gap kept after the stream predecessor, d:
    after the producer on another stream (replay's plan)."""
    n = len(ts)
    kinds = np.asarray(sweep_kind, dtype=np.int8)
    idx = np.asarray(sweep_idx, dtype=np.int64)
    is_ev = kinds == SWEEP_EVENT
    pos = np.full(n, -1, dtype=np.int64)
    pos[idx[is_ev]] = np.nonzero(is_ev)[0]

    def swept_before(other: np.ndarray) -> np.ndarray:
        # A predecessor the sweep has not reached yet reads as "not replayed" there: no link.
        return (other >= 0) & (pos[np.maximum(other, 0)] < pos)

    prev_in = np.where(swept_before(prev), prev, -1)
    dep_in = np.where(swept_before(dep), dep, -1)
    sync_pos = np.nonzero(kinds == SWEEP_SYNC)[0]
    sync_of_pos = idx[sync_pos]
    # Segments: split at every blocking call, and before a consumer whose producer is in its segment.
    splits: list[int] = []
    consumers = np.nonzero(dep_in >= 0)[0]
    consumers = consumers[np.argsort(pos[consumers], kind="stable")]
    last_sync = np.searchsorted(sync_pos, pos[consumers]) - 1
    for c, ls in zip(consumers.tolist(), last_sync.tolist()):
        start = max(int(sync_pos[ls]) if ls >= 0 else -1, splits[-1] if splits else -1)
        if pos[dep_in[c]] >= start:
            splits.append(int(pos[c]))
    split_pos = np.asarray(splits, dtype=np.int64)
    seg = np.searchsorted(sync_pos, pos) + np.searchsorted(split_pos, pos, side="right")

    root = _roots(prev_in)
    chain_order = np.lexsort((pos, root))
    r_sorted = root[chain_order]
    chain_first = np.nonzero(np.r_[True, r_sorted[1:] != r_sorted[:-1]])[0] if n else np.zeros(0, dtype=np.int64)
    chain_len = np.diff(np.r_[chain_first, n])
    gap = np.where(prev_in >= 0, g, 0.0)[chain_order]

    seg_order = np.lexsort((pos, root, seg))
    s_sorted, r_seg = seg[seg_order], root[seg_order]
    seg_first = np.nonzero(np.r_[True, s_sorted[1:] != s_sorted[:-1]])[0] if n else np.zeros(0, dtype=np.int64)
    seg_end = np.r_[seg_first[1:], n].astype(np.int64)
    piece_start = (
        np.r_[True, (r_seg[1:] != r_seg[:-1]) | (s_sorted[1:] != s_sorted[:-1])] if n else np.zeros(0, dtype=bool)
    )
    prev_seg = prev_in[seg_order]
    carry = np.where(piece_start & (prev_seg >= 0), prev_seg, -1)  # a piece's head continues an earlier chain
    dep_of = dep_in[seg_order]
    pid_seg = pids[seg_order]
    piece_at = np.nonzero(piece_start)[0]
    items: list[tuple[int, tuple]] = []
    lo, hi = np.searchsorted(piece_at, seg_first), np.searchsorted(piece_at, seg_end)
    for a, b, i, j in zip(seg_first.tolist(), seg_end.tolist(), lo.tolist(), hi.tolist()):
        ps = piece_at[i:j]
        pieces = list(zip((ps - a).tolist(), (np.r_[ps[1:], b] - a).tolist()))
        clocks = np.unique(pid_seg[a:b]).tolist()
        dep_local = np.nonzero(dep_of[a:b] >= 0)[0]
        # Keyed by its first sweep position: every position of a segment lies between the same two boundaries.
        items.append(
            (int(pos[seg_order[a:b]].min()), ("seg", a, b, pieces, clocks, dep_local if len(dep_local) else None))
        )
    items += [(int(p), ("sync", int(j))) for p, j in zip(sync_pos.tolist(), sync_of_pos.tolist())]
    items.sort(key=lambda t: t[0])
    so = seg_order
    return Chains(
        n,
        chain_order,
        chain_first,
        chain_len,
        gap,
        so,
        [s for _, s in items],
        carry,
        dep_of,
        launch[so],
        has_launch[so],
        lat[so],
        ts[so],
        end[so],
        pids[so],
        d[so],
    )


class Clocks:
    """The CPU clocks (replay._Clock: lists) mirrored in numpy arrays for the solver. A clock only appends
    breakpoints or rewrites its last one, so the mirror copies what changed since it last looked."""

    def __init__(self, clocks: list) -> None:
        self.clocks = clocks
        self.held: list[list[Any]] = [[0, np.empty(64), np.empty(64), np.empty(64)] for _ in clocks]  # length, t, n, s

    def at(self, code: int, x: np.ndarray) -> np.ndarray:
        """clock `code` at the measured times x (x before its first breakpoint: unchanged)."""
        clk = self.clocks[code]
        held = self.held[code]
        have, size = held[0], len(clk.t)
        if len(held[1]) < size:
            for k in (1, 2, 3):
                held[k] = np.resize(held[k], 2 * size)
        lo = max(have - 1, 0)  # the last breakpoint may have been rewritten
        held[1][lo:size], held[2][lo:size], held[3][lo:size] = clk.t[lo:], clk.n[lo:], clk.s[lo:]
        held[0] = size
        t, nn, s = held[1][:size], held[2][:size], held[3][:size]
        k = t.searchsorted(x, side="right") - 1
        km = np.maximum(k, 0)
        return np.where(k >= 0, nn[km] + s[km] * (x - t[km]), x)


def solve(
    ch: Chains, new_dur: np.ndarray, clocks: list, on_sync: Callable[[int, np.ndarray, float], None]
) -> np.ndarray:
    """Replayed ends of every event (times in the caller's frame) for these new durations.
    `on_sync(j, ends, max_late)` runs blocking call j with the ends replayed so far (NaN: not yet) and the
    largest lateness so far."""
    n = ch.n
    end2 = np.full(n, np.nan)
    # S along each chain: the sum of (gap if it follows its predecessor) + new duration.
    co = ch.chain_order
    w = ch.gap + new_dur[co]
    cs = np.cumsum(w)
    base_of_chain = np.repeat(cs[ch.chain_first] - w[ch.chain_first], ch.chain_len)
    S = np.empty(n)
    S[co] = cs - base_of_chain
    so = ch.seg_order
    S_seg, d_seg = S[so], new_dur[so]
    x_seg, has_seg, lat_seg, ts_seg = ch.launch, ch.has_launch, ch.lat, ch.ts
    end_seg, pid_seg, d_dep = ch.end, ch.pids, ch.dep_gap
    u_ev = np.full(n, np.nan)
    clock_arrays = Clocks(clocks)
    max_late = 0.0
    for step in ch.steps:
        if step[0] == "sync":
            on_sync(step[1], end2, max_late)
            continue
        _, a, b, pieces, codes, dep_local = step
        x = x_seg[a:b]
        if len(codes) == 1:
            on_clock = clock_arrays.at(codes[0], x)
        else:
            on_clock = np.empty(b - a)
            p = pid_seg[a:b]
            for code in codes:
                m = p == code
                on_clock[m] = clock_arrays.at(code, x[m])
        start = np.where(has_seg[a:b], on_clock + lat_seg[a:b], ts_seg[a:b])
        if dep_local is not None:
            q = ch.dep_of[a + dep_local]
            start[dep_local] = np.maximum(start[dep_local], end2[q] + d_dep[a + dep_local])
        u = start + d_seg[a:b] - S_seg[a:b]
        for s, t in pieces:
            c = ch.carry[a + s]
            if c >= 0 and u_ev[c] > u[s]:
                u[s] = u_ev[c]
            if t - s > 1:
                np.maximum.accumulate(u[s:t], out=u[s:t])
        ev = so[a:b]
        u_ev[ev] = u
        e = u + S_seg[a:b]
        end2[ev] = e
        late = float((e - end_seg[a:b]).max())
        if late > max_late:
            max_late = late
    return end2
