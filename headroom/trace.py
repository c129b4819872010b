"""Load Kineto (torch.profiler) JSON traces into compact columnar tables.

Only the fields headroom uses are decoded (msgspec skips the rest without
building Python objects for them), and events are split by kind into pandas
DataFrames with numeric columns: one row per GPU activity, per CPU range and
per runtime/driver call. Nothing keeps a dict per event.

Timestamps stay in the trace's microseconds. Traces that carry
``baseTimeNanoseconds`` store ``ts`` relative to it; older traces store epoch
microseconds (as integers, exact in float64). ``Trace.base_ns`` records the
base so absolute times can be recovered.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np
import pandas as pd

from headroom.errors import UserError


class TraceError(UserError):
    """A trace that cannot be read; the message names the file and the problem."""


# --- the typed wire format ---------------------------------------------------

Id = Union[int, str, None]


class _Args(msgspec.Struct, rename={"external_id": "External id"}, gc=False):
    external_id: Id = None
    correlation: Id = None
    device: Id = None
    stream: Id = None
    bytes: Union[int, float, None] = None
    # Inductor/Triton cpu_op events carry these; they are CPU events all the same.
    kernel_backend: Union[str, None] = None


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Union[int, str] = 0
    tid: Union[int, str] = 0
    ts: Union[float, str, None] = None
    dur: Union[float, str, None] = None
    id: Id = None
    args: Union[_Args, None] = None


class _TraceFile(msgspec.Struct):
    # Events stay raw (views into the input) and are decoded in chunks, so the
    # typed structs of only one chunk are alive at a time.
    traceEvents: Union[list[msgspec.Raw], None] = None
    baseTimeNanoseconds: Union[int, None] = None
    schemaVersion: msgspec.Raw = msgspec.Raw()
    deviceProperties: msgspec.Raw = msgspec.Raw()
    distributedInfo: msgspec.Raw = msgspec.Raw()
    traceName: msgspec.Raw = msgspec.Raw()
    # headroom's own run manifest, written by `headroom profile`.
    headroom: msgspec.Raw = msgspec.Raw()


_DECODER = msgspec.json.Decoder(_TraceFile)
_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_CHUNK = 65536

# Kineto renamed its categories over the years; map the old spellings.
_GPU_KINDS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
}
_LAUNCH_CATS = {"cuda_runtime", "runtime", "cuda_driver", "driver"}
_CPU_RANGE_CATS = {"cpu_op", "operator", "user_annotation", "python_function"}
_FLOW_CATS = {"ac2g", "async_cpu_to_gpu"}


@dataclass
class Trace:
    """One profiler trace (one rank), as typed tables.

    gpu:      name, kind (kernel|memcpy|memset), device, stream, ts, dur,
              correlation, bytes, index (position in traceEvents)
    cpu:      name, cat (cpu_op|user_annotation|python_function), pid, tid,
              ts, dur, external_id
    launches: name, cat (cuda_runtime|cuda_driver), pid, tid, ts, dur,
              correlation, external_id
    """

    source: str
    gpu: pd.DataFrame
    cpu: pd.DataFrame
    launches: pd.DataFrame
    gpu_annotations: pd.DataFrame
    base_ns: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def has_gpu(self) -> bool:
        return len(self.gpu) > 0

    @cached_property
    def steps(self) -> pd.DataFrame:
        """ProfilerStep#N ranges recorded on the CPU: step, ts, dur, end."""
        c = self.cpu
        c = c[(c["cat"] == "user_annotation").to_numpy() | (c["cat"] == "cpu_op").to_numpy()]
        annotations = c[(c["cat"] == "user_annotation").to_numpy()]
        # Modern traces record steps as user_annotation; very old ones as cpu_op.
        c = annotations if starts_with(annotations["name"], "ProfilerStep#").any() else c
        m = starts_with(c["name"], "ProfilerStep#")
        s = c.loc[m, ["name", "ts", "dur"]].copy()
        s["name"] = s["name"].astype(str)
        s["step"] = pd.to_numeric(s["name"].str.slice(len("ProfilerStep#")), errors="coerce")
        s = s.dropna(subset=["step"]).astype({"step": "int64"})
        # A step can appear on several threads' views; keep one range per step.
        s = s.sort_values(["step", "dur"], ascending=[True, False]).drop_duplicates("step")
        s["end"] = s["ts"] + s["dur"]
        return s[["step", "ts", "dur", "end"]].reset_index(drop=True)


def starts_with(names: pd.Series, prefix: str) -> np.ndarray:
    """Boolean mask of names starting with `prefix` (faster than .str on object columns)."""
    return np.fromiter((n.startswith(prefix) for n in names.tolist()), dtype=bool, count=len(names))


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    if not raw:
        raise TraceError(f"{path}: empty file")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as e:
            raise TraceError(f"{path}: truncated or corrupt gzip ({e})") from None
        if not raw:
            raise TraceError(f"{path}: empty file (after gunzip)")
    return raw


def _num(v) -> float:
    if v is None:
        return np.nan
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return np.nan
    return v


def _int_or(v, default: int) -> int:
    if v is None:
        return default
    if isinstance(v, int):
        return v
    try:
        return int(v, 0)
    except (TypeError, ValueError):
        return default


def load_trace(path: str | os.PathLike) -> Trace:
    """Read one Kineto trace (``.json`` or ``.json.gz``) into a :class:`Trace`."""
    path = Path(path)
    # Millions of short-lived structs: the cyclic GC would rescan them for nothing.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        doc = _decode(path)
        return _tabulate(str(path), doc)
    finally:
        if gc_was_enabled:
            gc.enable()


def _decode(path: Path) -> _TraceFile:
    raw = _read_bytes(path)
    try:
        doc = _DECODER.decode(raw)
    except msgspec.ValidationError as e:
        # Valid JSON of the wrong shape (e.g. a list, or traceEvents not a list).
        raise TraceError(f"{path}: not a Kineto trace ({e})") from None
    except msgspec.DecodeError as e:
        raise TraceError(f"{path}: invalid JSON ({e})") from None
    if doc.traceEvents is None:
        raise TraceError(f"{path}: not a Kineto trace (no 'traceEvents' list)")
    return doc


def _floats(values: list) -> np.ndarray:
    try:
        return np.array(values, dtype=np.float64)  # None -> nan
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=np.float64)


def _small_ints(values: list) -> np.ndarray:
    """device / stream numbers; strings like "0x7" parse, anything else is -1."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([_int_or(v, -1) for v in values], dtype=np.int64)


def _thread_keys(values: list) -> pd.Categorical:
    """pid/tid as strings (traces mix ints and names like "Spans"), stored as categories."""
    try:
        arr = np.array(values, dtype=np.int64)
        uniq, inverse = np.unique(arr, return_inverse=True)
        return pd.Categorical.from_codes(inverse, categories=[str(u) for u in uniq])
    except (TypeError, ValueError, OverflowError):
        return pd.Categorical([str(v) for v in values])


def _ids(values: list) -> np.ndarray:
    """int64 ids (-1 where absent) where they fit; the rare id beyond 64 bits keeps an object column."""
    values = [-1 if v is None else v for v in values]
    try:
        return np.array(values, dtype=np.int64)
    except (OverflowError, TypeError, ValueError):
        out = []
        for v in values:
            if isinstance(v, str):
                try:
                    v = int(v, 0)
                except ValueError:
                    pass
            out.append(v)
        return np.array(out, dtype=object)


class _Columns:
    """Column lists for one table, filled chunk by chunk."""

    def __init__(self, *names: str):
        self.cols: dict[str, list] = {n: [] for n in names}

    def extend(self, **values: list) -> None:
        for k, v in values.items():
            self.cols[k].extend(v)


def _event_fields(sub: list[_Event]) -> dict[str, list]:
    """The fields every table keeps: name, pid, tid, ts, dur."""
    return {"name": [e.name for e in sub], "pid": [e.pid for e in sub], "tid": [e.tid for e in sub],
            "ts": [e.ts for e in sub], "dur": [e.dur for e in sub]}


def _cpu_side_columns(c: dict[str, list]) -> dict[str, Any]:
    """name/cat/pid/tid/ts/dur columns of a CPU-side table (launches, CPU ranges)."""
    return {"name": np.array(c["name"], dtype=object), "cat": pd.Categorical(c["cat"]),
            "pid": _thread_keys(c["pid"]), "tid": _thread_keys(c["tid"]),
            "ts": _floats(c["ts"]), "dur": _floats(c["dur"])}


def _decode_events(raws: list) -> list[_Event]:
    try:
        return _EVENTS_DECODER.decode(b"[" + b",".join(raws) + b"]")
    except msgspec.ValidationError as e:
        raise TraceError(f"not a Kineto trace (an event is malformed: {e})") from None


def _tabulate(source: str, doc: _TraceFile) -> Trace:
    """Decode events chunk by chunk into per-table column lists, then build DataFrames."""
    raws = doc.traceEvents
    gpu = _Columns("name", "cat", "dev", "stream", "pid", "tid", "ts", "dur", "correlation", "external_id", "bytes", "index")
    launch = _Columns("name", "cat", "pid", "tid", "ts", "dur", "correlation", "external_id")
    cpu = _Columns("name", "cat", "pid", "tid", "ts", "dur", "external_id")
    ann = _Columns("name", "pid", "tid", "ts", "dur")
    flow_positions: list[int] = []
    for start in range(0, len(raws), _CHUNK):
        try:
            events = _decode_events(raws[start:start + _CHUNK])
        except TraceError as e:
            raise TraceError(f"{source}: {e}") from None
        by_cat: dict[str, list[int]] = {}
        for i, e in enumerate(events):
            if e.ph == "X":
                idx = by_cat.get(e.cat)
                if idx is None:
                    idx = by_cat[e.cat] = []
                idx.append(i)
            elif e.ph in ("s", "f", "t"):
                flow_positions.append(start + i)
        for cat, idx in by_cat.items():
            kind = cat.lower()
            sub = [events[i] for i in idx]
            if kind in _GPU_KINDS:
                args = [e.args for e in sub]
                gpu.extend(
                    **_event_fields(sub), cat=[_GPU_KINDS[kind]] * len(sub),
                    dev=[a.device if a is not None else None for a in args],
                    stream=[a.stream if a is not None else None for a in args],
                    correlation=[a.correlation if a is not None else None for a in args],
                    external_id=[a.external_id if a is not None else None for a in args],
                    bytes=[a.bytes if a is not None else None for a in args],
                    index=[start + i for i in idx])
            elif kind in _LAUNCH_CATS:
                args = [e.args for e in sub]
                launch.extend(
                    **_event_fields(sub), cat=["cuda_driver" if "driver" in kind else "cuda_runtime"] * len(sub),
                    correlation=[a.correlation if a is not None else None for a in args],
                    external_id=[a.external_id if a is not None else None for a in args])
            elif kind in _CPU_RANGE_CATS:
                cpu.extend(
                    **_event_fields(sub), cat=["cpu_op" if kind == "operator" else kind] * len(sub),
                    external_id=[e.args.external_id if e.args is not None else None for e in sub])
            elif kind == "gpu_user_annotation":
                ann.extend(**_event_fields(sub))
        del events

    g = gpu.cols
    gpu_df = pd.DataFrame({
        "name": np.array(g["name"], dtype=object),
        "kind": pd.Categorical(g["cat"]),
        "device": _small_ints([d if d is not None else p for d, p in zip(g["dev"], g["pid"])]),
        "stream": _small_ints([s if s is not None else t for s, t in zip(g["stream"], g["tid"])]),
        "ts": _floats(g["ts"]),
        "dur": _floats(g["dur"]),
        "correlation": np.array(g["correlation"], dtype=object),
        "external_id": np.array(g["external_id"], dtype=object),
        "bytes": _floats(g["bytes"]),
        "index": np.array(g["index"], dtype=np.int64),
    })
    c = launch.cols
    launches = pd.DataFrame({
        **_cpu_side_columns(c),
        "correlation": np.array(c["correlation"], dtype=object),
        "external_id": np.array(c["external_id"], dtype=object),
    })

    # Flows (ac2g / async_cpu_to_gpu) link a launch to its kernel when a trace
    # omits `correlation` in args; their id is the correlation.
    if flow_positions and (gpu_df["correlation"].isna().any() or launches["correlation"].isna().any()):
        flows = [e for e in _decode_events([raws[i] for i in flow_positions])
                 if e.cat.lower() in _FLOW_CATS and e.id is not None]
        starts = {(str(e.pid), str(e.tid), _num(e.ts)): e.id for e in flows if e.ph == "s"}
        ends = {(str(e.pid), str(e.tid), _num(e.ts)): e.id for e in flows if e.ph != "s"}
        gpu_df["correlation"] = [c if c is not None else ends.get((str(p), str(t), _num(ts)))
                                 for c, p, t, ts in zip(gpu_df["correlation"], g["pid"], g["tid"], g["ts"])]
        launches["correlation"] = [c if c is not None else starts.get((str(p), str(t), float(ts)))
                                   for c, p, t, ts in zip(launches["correlation"], launches["pid"],
                                                          launches["tid"], launches["ts"])]
    for df in (gpu_df, launches):
        df["correlation"] = _ids(list(df["correlation"]))
        df["external_id"] = _ids(list(df["external_id"]))

    c = cpu.cols
    cpu_df = pd.DataFrame({
        **_cpu_side_columns(c),
        "external_id": _ids(c["external_id"]),
    })
    c = ann.cols
    gpu_ann = pd.DataFrame({
        "name": np.array(c["name"], dtype=object),
        "device": _small_ints(c["pid"]),
        "stream": _small_ints(c["tid"]),
        "ts": _floats(c["ts"]),
        "dur": _floats(c["dur"]),
    })
    for df in (gpu_df, cpu_df, launches, gpu_ann):
        df["dur"] = df["dur"].fillna(0.0)

    meta: dict[str, Any] = {}
    for key in ("schemaVersion", "deviceProperties", "distributedInfo", "traceName", "headroom"):
        raw = getattr(doc, key)
        if len(raw):
            meta[key] = msgspec.json.decode(raw)
    return Trace(
        source=source, gpu=gpu_df, cpu=cpu_df, launches=launches, gpu_annotations=gpu_ann,
        base_ns=doc.baseTimeNanoseconds, metadata=meta,
    )


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
