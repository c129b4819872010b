"""Load Kineto (torch.profiler) JSON traces into compact columnar tables.

Two libraries share the work (docs/trace-core.md, "Loader"):

* msgspec validates the whole document and splits ``traceEvents`` into raw
  byte views of each event, without building Python objects for them;
* polars parses those events, a chunk at a time, as newline-delimited JSON
  straight into typed columns (Rust, on all cores), keeping only the fields
  and the events headroom uses. Nothing builds a Python object per event.

A chunk polars cannot read with the typed schema (a timestamp written as a
string, hex or beyond-64-bit ids, ...) is decoded exactly by msgspec into the
same columns instead, so the odd trace is slower, never wrong.

The tables handed on are pandas DataFrames with numeric columns: one row per
GPU activity, per CPU range and per runtime/driver call.

Timestamps stay in the trace's microseconds. Traces that carry
``baseTimeNanoseconds`` store ``ts`` relative to it; older traces store epoch
microseconds (as integers, exact in float64). ``Trace.base_ns`` records the
base so absolute times can be recovered.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

from headroom.trace.kineto import TraceError, _decode, _read_bytes
from headroom.trace.tables import Trace, _tabulate

__all__ = ["Trace", "TraceError", "find_trace_files", "load_trace", "load_traces", "read_trace_json"]


def load_trace(path: str | os.PathLike) -> Trace:
    """Read one Kineto trace (``.json`` or ``.json.gz``) into a :class:`Trace`."""
    path = Path(path)
    # A million Raw views (and, on the exact path, structs): the cyclic GC would rescan them for nothing.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        tables, base_ns, meta = _decode(path)
        return _tabulate(str(path), tables, base_ns, meta)
    finally:
        if gc_was_enabled:
            gc.enable()


def find_trace_files(path: str | os.PathLike) -> list[Path]:
    """A trace file, or every ``*.json``/``*.json.gz`` trace in a directory (one per rank)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir()
                       if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz"))
                       and not p.name.startswith("manifest"))
        if not files:
            raise TraceError(f"{path}: directory holds no .json or .json.gz trace")
        return files
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    return [path]


def load_traces(path: str | os.PathLike) -> list[Trace]:
    return [load_trace(p) for p in find_trace_files(path)]


def read_trace_json(path: str | os.PathLike) -> dict:
    """The whole trace as plain JSON (for rewriting it, e.g. `annotate`)."""
    raw = _read_bytes(Path(path))
    try:
        return json.loads(raw)
    except ValueError as e:
        raise TraceError(f"{path}: invalid JSON ({e})") from None
