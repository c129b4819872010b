"""One rank's communication: the intervals each event did its own work in, how much communication
ran beside compute (*overlapped*) and how much with none (*exposed*), and its collectives.

On GPU traces compute means kernels that are not communication (memcpy/memset are neither), as
HTA's ``get_comm_comp_overlap`` counts it; on CPU-only traces it means the exclusive time of every
CPU op that is not communication (docs/distributed.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from headroom.datafiles import shipped
from headroom.trace.accounting import union_length
from headroom.trace.analysis import MODE_CPU, Analysis

COMMUNICATION = "communication"
# Ops that issue, wrap or wait for a collective on the calling thread, not the transfer (data/ranks.toml).
_API_CALL = re.compile(shipped("ranks.toml")["collectives"]["api_calls"])


def activity_segments(a: Analysis) -> pd.DataFrame:
    """Time intervals in which each event was doing its own work.

    GPU traces: one interval per GPU activity. CPU-only traces: each CPU op's
    exclusive time (its range minus its children's, per thread), as one or more
    intervals. Columns: ts, end, event (row in ``a.events``), comm, compute.
    """
    ev = a.events
    n = len(ev)
    cat = ev["category"].astype(str).to_numpy() if n else np.zeros(0, dtype=object)
    comm = cat == COMMUNICATION
    if a.mode != MODE_CPU:
        kind = ev["kind"].astype(str).to_numpy() if n else np.zeros(0, dtype=object)
        return pd.DataFrame(
            {
                "ts": ev["ts"].to_numpy(dtype=float),
                "end": ev["end"].to_numpy(dtype=float),
                "event": np.arange(n),
                "comm": comm,
                "compute": (kind == "kernel") & ~comm,
            }
        )
    ts, end = ev["ts"].to_numpy(dtype=float), ev["end"].to_numpy(dtype=float)
    rows_ts: list[float] = []
    rows_end: list[float] = []
    rows_ev: list[int] = []
    for _, idx in ev.groupby("stream", sort=False).indices.items():
        order = idx[np.lexsort((-(end[idx] - ts[idx]), ts[idx]))]
        stack: list[list[float]] = []  # [event, end, cursor]

        def close_until(t: float) -> None:
            while stack and stack[-1][1] <= t:
                i, e, c = stack.pop()
                if e > c:
                    rows_ts.append(c)
                    rows_end.append(e)
                    rows_ev.append(int(i))
                if stack:
                    stack[-1][2] = max(stack[-1][2], e)

        for k in order.tolist():
            t = ts[k]
            close_until(t)
            e = end[k]
            if stack:
                top = stack[-1]
                if t > top[2]:
                    rows_ts.append(top[2])
                    rows_end.append(t)
                    rows_ev.append(int(top[0]))
                top[2] = max(top[2], t)
                e = min(e, top[1])  # a child that outlives its parent is cut at the parent's end
            stack.append([k, e, t])
        close_until(np.inf)
    event = np.asarray(rows_ev, dtype=np.int64)
    seg_comm = comm[event] if len(event) else np.zeros(0, dtype=bool)
    return pd.DataFrame(
        {
            "ts": np.asarray(rows_ts, dtype=float),
            "end": np.asarray(rows_end, dtype=float),
            "event": event,
            "comm": seg_comm,
            "compute": ~seg_comm,
        }
    )


def merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint sorted intervals (zero-length ones dropped)."""
    keep = ends > starts
    s, e = starts[keep], ends[keep]
    if len(s) == 0:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    new = np.concatenate([[True], s[1:] > e[:-1]])
    block = np.cumsum(new) - 1
    out_e = np.full(int(block[-1]) + 1, -np.inf)
    np.maximum.at(out_e, block, e)
    return s[new], out_e


@dataclass(frozen=True)
class CommSplit:
    """A rank's communication time: how much ran beside compute and how much was exposed."""

    comm_us: float  # sum of communication durations (self time on CPU-only traces)
    comm_busy_us: float  # union of communication intervals
    overlapped_us: float  # communication intervals while compute ran
    exposed_us: float  # communication intervals while no compute ran
    compute_busy_us: float  # union of compute intervals

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "comm_us",
        "comm_busy_us",
        "overlapped_us",
        "exposed_us",
        "compute_busy_us",
        "overlap_fraction",
    )

    @property
    def overlap_fraction(self) -> float:
        return self.overlapped_us / self.comm_busy_us if self.comm_busy_us > 0 else 0.0


def comm_split(a: Analysis, segments: pd.DataFrame | None = None) -> CommSplit:
    """Overlapped and exposed communication on one rank (|A∩B| = |A| + |B| - |A∪B|)."""
    seg = activity_segments(a) if segments is None else segments
    ts, end = seg["ts"].to_numpy(dtype=float), seg["end"].to_numpy(dtype=float)
    c, p = seg["comm"].to_numpy(dtype=bool), seg["compute"].to_numpy(dtype=bool)
    comm_busy = union_length(ts[c], end[c])
    compute_busy = union_length(ts[p], end[p])
    both = union_length(ts[c | p], end[c | p])
    overlapped = max(comm_busy + compute_busy - both, 0.0)
    ev = a.events
    comm_us = float(ev.loc[ev["category"].astype(str) == COMMUNICATION, "dur"].sum()) if len(ev) else 0.0
    return CommSplit(comm_us, comm_busy, overlapped, max(comm_busy - overlapped, 0.0), compute_busy)


def collectives(a: Analysis) -> pd.DataFrame:
    """The rank's collectives in order: name, seq (k-th of that name), ts, end, dur, stream, event.

    GPU traces: every communication kernel. CPU-only traces: communication ops that
    do the transfer (``gloo:all_reduce`` on a gloo worker thread), not the API call
    that enqueues it (``c10d::allreduce_``).
    """
    ev = a.events
    if len(ev) == 0:
        return pd.DataFrame(columns=["name", "seq", "ts", "end", "dur", "stream", "event"])
    is_comm = ev["category"].astype(str).to_numpy() == COMMUNICATION
    names = ev["name"].astype(str).to_numpy(dtype=object)
    if a.mode == MODE_CPU:
        is_comm &= np.array([not _API_CALL.search(n) for n in names], dtype=bool)
    else:
        is_comm &= ev["kind"].astype(str).to_numpy() == "kernel"
    idx = np.flatnonzero(is_comm)
    c = pd.DataFrame(
        {
            "name": names[idx],
            "ts": ev["ts"].to_numpy(dtype=float)[idx],
            "end": ev["end"].to_numpy(dtype=float)[idx],
            "stream": (ev["device"].astype(str) + "/" + ev["stream"].astype(str)).to_numpy()[idx],
            "event": idx,
        }
    )
    c["dur"] = c["end"] - c["ts"]
    c = c.sort_values(["ts", "end", "event"], kind="stable").reset_index(drop=True)
    c["seq"] = c.groupby("name", sort=False).cumcount()
    return c[["name", "seq", "ts", "end", "dur", "stream", "event"]]
