"""What orders GPU work across streams in the replay: the trace's recorded waits (``cuda_sync``
stream-wait events, and the runtime's wait calls where CUDA >= 12.9 records none) and, for a
consumer kernel that started right after a producer on another stream, the inferred dependency.

See :mod:`headroom.projection.project` for the model.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from headroom.projection.baseline import kept
from headroom.trace.intervals import codes_and_texts

if TYPE_CHECKING:
    from headroom.projection.baseline import Baseline


def stream_keys(ev: pd.DataFrame) -> np.ndarray:
    """One code per (device, stream) pair as text, numbered in order of first appearance; -1 where
    either is missing. Per distinct value, not per row: a trace has a few streams and 10^5..10^6 events."""
    n = len(ev)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    dev = _text_codes(ev["device"]) if "device" in ev.columns else np.zeros(n, dtype=np.int64)
    st = _text_codes(ev["stream"]) if "stream" in ev.columns else np.zeros(n, dtype=np.int64)
    valid = (dev >= 0) & (st >= 0)
    codes = np.full(n, -1, dtype=np.int64)
    codes[valid] = pd.factorize(dev[valid] * (int(st.max()) + 1) + st[valid])[0]
    return codes


def _text_codes(values: pd.Series) -> np.ndarray:
    """Codes equal exactly where the values' texts are (`str(1) == str("1")`); -1 where missing."""
    codes, texts = codes_and_texts(values)
    if not texts:
        return codes.astype(np.int64)
    _, by_text = np.unique(np.array(texts, dtype=object), return_inverse=True)
    return np.where(codes < 0, -1, by_text.reshape(-1)[np.maximum(codes, 0)]).astype(np.int64)


def pid_codes(values: Iterable, table: dict) -> np.ndarray:
    """Each value's code in `table` (text of the value; None and NaN are ""), new texts added in order of
    first appearance. Done per distinct value (trace.intervals.codes_and_texts): there are a handful of
    processes and 10^5..10^6 events."""
    codes, texts = codes_and_texts(values if isinstance(values, pd.Series) else np.asarray(list(values), dtype=object))
    if len(codes) == 0:
        return np.zeros(0, dtype=np.int64)
    shifted = codes + 1  # 0: the missing values, text ""
    texts = [""] + texts
    present, first = np.unique(shifted, return_index=True)
    mapped = np.zeros(len(texts), dtype=np.int64)
    for k in present[np.argsort(first, kind="stable")].tolist():
        mapped[k] = table.setdefault(texts[k], len(table))
    return mapped[shifted]


STREAM_WAIT_EVENT = "Stream Wait Event"  # Kineto's name for a CUPTI stream-wait-event sync record


@dataclass(frozen=True)
class StreamWaits:
    """The cross-stream dependencies a trace's ``cuda_sync`` records give, and how each was found."""

    dep: np.ndarray  # per event: the index of the event it waits on in another stream, -1 if none
    recorded: int  # waits whose cudaEventRecord (stream and correlation) the record names
    inferred: int  # waits whose record is unresolved (-1), taken from the waiting thread's last record
    unresolved: int  # waits neither way could place


def stream_waits(events: pd.DataFrame, syncs: pd.DataFrame | None, runtime: pd.DataFrame | None) -> StreamWaits:
    """Cross-stream dependencies from Kineto ``cuda_sync`` "Stream Wait Event" records.

    Traces taken with ``enable_cuda_sync_events`` record each ``cudaStreamWaitEvent``: the waiting
    ``stream``, its ``correlation`` (the wait call), ``wait_on_stream`` and
    ``wait_on_cuda_event_record_corr_id`` (the ``cudaEventRecord`` call). The producer is the last event
    on the recorded stream launched before that record; the consumer is the first event on the waiting
    stream launched after the wait call (by GPU start, for events without a launch).

    CUDA >= 12.9 traces can leave both fields -1 (Kineto enabled CUPTI's synchronization records but not
    its CUDA-event records: pytorch/pytorch#195068). Such a wait is placed from the CPU side instead: the
    record is the waiting thread's last ``cudaEventRecord*`` call before the wait, and its stream the one
    that thread last launched to (other than the waiting stream) -- the pattern of ``wait_stream``.
    """
    n = len(events)
    dep = np.full(n, -1, dtype=np.int64)
    none = StreamWaits(dep, 0, 0, 0)
    if syncs is None or runtime is None or len(syncs) == 0 or n == 0:
        return none
    need = {"stream", "ts", "wait_on_stream", "wait_on_cuda_event_record_corr_id"}
    if not need <= set(syncs.columns) or "correlation" not in events.columns:
        return none
    if "name" in syncs.columns:  # "Event Sync", "Stream Synchronize", ... block the CPU, not a stream
        syncs = syncs[syncs["name"].astype(str) == STREAM_WAIT_EVENT]
    corr_col = "correlation" in syncs.columns
    rt_ts, rt_thread = _runtime_calls(
        runtime, [*(syncs["correlation"] if corr_col else ()), *syncs["wait_on_cuda_event_record_corr_id"]]
    )
    stream = events["stream"].astype(str).to_numpy()
    ts = events["ts"].to_numpy(dtype=float)
    launch = events["launch_ts"].to_numpy(dtype=float) if "launch_ts" in events.columns else np.full(n, np.nan)
    has_launch = np.isfinite(launch)
    threads = _Threads(events, runtime)
    by_stream: dict[str, np.ndarray] = {}
    codes, names = pd.factorize(stream)  # by hashing: a sort of 10^5 texts costs more than the waits
    order = np.argsort(codes, kind="stable")
    for k, idx in enumerate(np.split(order, np.cumsum(np.bincount(codes, minlength=len(names)))[:-1])):
        by_stream[names[k]] = idx[np.argsort(ts[idx], kind="stable")]
    counts = {"recorded": 0, "inferred": 0, "unresolved": 0}
    for row in syncs.itertuples(index=False):
        dst = str(row.stream)
        wait_corr = row.correlation if corr_col else None
        t_wait = rt_ts.get(wait_corr, float(row.ts))
        src, t_rec = str(row.wait_on_stream), rt_ts.get(row.wait_on_cuda_event_record_corr_id)
        how = "recorded"
        if t_rec is None or int(row.wait_on_stream) < 0:
            how, src, t_rec = "inferred", "", None
            thread = rt_thread.get(wait_corr)
            r = threads.records.get(thread) if thread else None
            if r is not None:
                k = np.searchsorted(r, t_wait, side="right") - 1
                if k >= 0 and thread is not None:
                    t_rec = float(r[k])
                    mine = np.flatnonzero(
                        (threads.of_events == f"{thread[0]}/{thread[1]}")
                        & has_launch
                        & (launch <= t_rec)
                        & (stream != dst)
                    )
                    if len(mine):
                        src = stream[mine[np.argmax(launch[mine])]]
        if t_rec is None or src not in by_stream or dst not in by_stream or src == dst:
            counts["unresolved"] += 1
            continue
        p_idx = by_stream[src]
        launched = p_idx[has_launch[p_idx] & (launch[p_idx] <= t_rec)]
        c_idx = by_stream[dst]
        after = c_idx[np.where(has_launch[c_idx], launch[c_idx] >= t_wait, ts[c_idx] >= float(row.ts))]
        if len(launched) == 0 or len(after) == 0:
            counts["unresolved"] += 1
            continue
        producer = launched[np.argmax(launch[launched])]
        consumer = after[0]
        counts[how] += 1
        if dep[consumer] < 0 or ts[producer] > ts[dep[consumer]]:
            dep[consumer] = producer
    return StreamWaits(dep, counts["recorded"], counts["inferred"], counts["unresolved"])


def _runtime_calls(runtime: pd.DataFrame, wanted: list) -> tuple[dict, dict]:
    """The start and the launching thread (pid, tid as text) of the runtime calls whose correlation is in
    `wanted`, by correlation (the last call of one repeated). Only those calls are read: a trace has a
    few dozen waits and 10^5 runtime calls."""
    calls = runtime[runtime["correlation"].isin(wanted).to_numpy()]
    corr = calls["correlation"].tolist()
    ts = dict(zip(corr, calls["ts"].tolist()))
    if not {"pid", "tid"} <= set(calls.columns):
        return ts, {}
    return ts, dict(zip(corr, zip(calls["pid"].astype(str), calls["tid"].astype(str))))


class _Threads:
    """What a wait whose record is unresolved reads, built when the first one asks: each thread's
    ``cudaEventRecord*`` starts, sorted, and each event's launching thread as ``pid/tid``."""

    def __init__(self, events: pd.DataFrame, runtime: pd.DataFrame) -> None:
        self._events, self._runtime = events, runtime

    @functools.cached_property
    def records(self) -> dict[tuple[str, str], np.ndarray]:
        runtime = self._runtime
        names = runtime["name"].astype(str) if "name" in runtime.columns else pd.Series([""] * len(runtime))
        rec = runtime[names.str.startswith("cudaEventRecord").to_numpy()]
        if not len(rec) or not {"pid", "tid"} <= set(rec.columns):
            return {}
        groups = rec.groupby([rec["pid"].astype(str), rec["tid"].astype(str)]).indices
        return {key: np.sort(rec["ts"].to_numpy(dtype=float)[idx]) for key, idx in groups.items()}

    @functools.cached_property
    def of_events(self) -> np.ndarray:
        ev = self._events
        if not {"launch_pid", "launch_tid"} <= set(ev.columns):
            return np.full(len(ev), "", dtype=object)
        return (ev["launch_pid"].astype(str) + "/" + ev["launch_tid"].astype(str)).to_numpy()


def cross_stream_deps(events: pd.DataFrame, syncs: pd.DataFrame | None, runtime: pd.DataFrame | None) -> np.ndarray:
    """For each event, the index of the event it waits on in another stream (-1 if none known):
    :func:`stream_waits`' dependencies."""
    return stream_waits(events, syncs, runtime).dep


def baseline_waits(b: Baseline) -> StreamWaits:
    """`stream_waits` of a baseline, kept on it (the replay plan and `project`'s warnings both read them),
    again when its events, syncs or runtime calls were replaced."""
    memo = kept(b, "_stream_waits", b.events, b.syncs, b.runtime)
    if "waits" not in memo:
        waits = stream_waits(b.events, b.syncs, b.runtime)
        waits.dep.setflags(write=False)  # shared by every later caller
        memo["waits"] = waits
    return memo["waits"]
