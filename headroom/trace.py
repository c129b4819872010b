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

import gzip
import json
import os
import zlib
from dataclasses import dataclass, field
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


class _Args(msgspec.Struct, rename={"external_id": "External id"}):
    external_id: Id = None
    correlation: Id = None
    device: Id = None
    stream: Id = None
    bytes: Union[int, float, None] = None
    # Inductor/Triton cpu_op events carry these; they are CPU events all the same.
    kernel_backend: Union[str, None] = None


class _Event(msgspec.Struct):
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
    traceEvents: Union[list[_Event], None] = None
    baseTimeNanoseconds: Union[int, None] = None
    schemaVersion: msgspec.Raw = msgspec.Raw()
    deviceProperties: msgspec.Raw = msgspec.Raw()
    distributedInfo: msgspec.Raw = msgspec.Raw()
    traceName: msgspec.Raw = msgspec.Raw()
    # headroom's own run manifest, written by `headroom profile`.
    headroom: msgspec.Raw = msgspec.Raw()


_DECODER = msgspec.json.Decoder(_TraceFile)

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

    @property
    def steps(self) -> pd.DataFrame:
        """ProfilerStep#N ranges recorded on the CPU: step, ts, dur, end."""
        c = self.cpu
        m = c["name"].str.startswith("ProfilerStep#")
        s = c.loc[m, ["name", "ts", "dur"]].copy()
        s["step"] = pd.to_numeric(s["name"].str.slice(len("ProfilerStep#")), errors="coerce")
        s = s.dropna(subset=["step"]).astype({"step": "int64"})
        # A step can appear on several threads' views; keep one range per step.
        s = s.sort_values(["step", "dur"], ascending=[True, False]).drop_duplicates("step")
        s["end"] = s["ts"] + s["dur"]
        return s[["step", "ts", "dur", "end"]].reset_index(drop=True)


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


def _as_ids(values: list) -> np.ndarray:
    """int64 ids where they fit; the rare id beyond 64 bits keeps an object column."""
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
    return _tabulate(str(path), doc)


def _tabulate(source: str, doc: _TraceFile) -> Trace:
    events = doc.traceEvents
    gpu_rows: list[tuple] = []
    cpu_rows: list[tuple] = []
    launch_rows: list[tuple] = []
    gpu_ann_rows: list[tuple] = []
    flow_start: dict[tuple, Any] = {}
    flow_end: dict[tuple, Any] = {}

    for i, e in enumerate(events):
        ph = e.ph
        cat = e.cat.lower()
        if ph == "X":
            a = e.args
            if cat in _GPU_KINDS:
                dev = a.device if a is not None and a.device is not None else e.pid
                stream = a.stream if a is not None and a.stream is not None else e.tid
                gpu_rows.append((
                    e.name, _GPU_KINDS[cat], _int_or(dev, -1), _int_or(stream, -1),
                    _num(e.ts), _num(e.dur),
                    a.correlation if a is not None else None,
                    a.external_id if a is not None else None,
                    _num(a.bytes) if a is not None else np.nan,
                    e.pid, e.tid, i,
                ))
            elif cat in _CPU_RANGE_CATS:
                cpu_rows.append((
                    e.name, "cpu_op" if cat == "operator" else cat, str(e.pid), str(e.tid),
                    _num(e.ts), _num(e.dur), a.external_id if a is not None else None,
                ))
            elif cat in _LAUNCH_CATS:
                launch_rows.append((
                    e.name, "cuda_driver" if "driver" in cat else "cuda_runtime",
                    str(e.pid), str(e.tid), _num(e.ts), _num(e.dur),
                    a.correlation if a is not None else None,
                    a.external_id if a is not None else None,
                ))
            elif cat == "gpu_user_annotation":
                gpu_ann_rows.append((e.name, _int_or(e.pid, -1), _int_or(e.tid, -1), _num(e.ts), _num(e.dur)))
        elif ph in ("s", "f", "t") and cat in _FLOW_CATS and e.id is not None:
            key = (str(e.pid), str(e.tid), _num(e.ts))
            (flow_start if ph == "s" else flow_end)[key] = e.id

    gpu = pd.DataFrame(
        gpu_rows,
        columns=["name", "kind", "device", "stream", "ts", "dur", "correlation",
                 "external_id", "bytes", "pid", "tid", "index"],
    )
    # Flows (ac2g / async_cpu_to_gpu) link a launch to its kernel when a
    # trace omits `correlation` in args; their id is the correlation.
    if flow_end and len(gpu) and gpu["correlation"].isna().any():
        miss = gpu["correlation"].isna()
        gpu.loc[miss, "correlation"] = [
            flow_end.get((str(p), str(t), float(s)))
            for p, t, s in zip(gpu.loc[miss, "pid"], gpu.loc[miss, "tid"], gpu.loc[miss, "ts"])
        ]
    launches = pd.DataFrame(
        launch_rows,
        columns=["name", "cat", "pid", "tid", "ts", "dur", "correlation", "external_id"],
    )
    if flow_start and len(launches) and launches["correlation"].isna().any():
        miss = launches["correlation"].isna()
        launches.loc[miss, "correlation"] = [
            flow_start.get((p, t, float(s)))
            for p, t, s in zip(launches.loc[miss, "pid"], launches.loc[miss, "tid"], launches.loc[miss, "ts"])
        ]
    gpu = gpu.drop(columns=["pid", "tid"])
    for df in (gpu, launches):
        for col in ("correlation", "external_id"):
            df[col] = _as_ids(df[col].where(df[col].notna(), -1).tolist())
    cpu = pd.DataFrame(cpu_rows, columns=["name", "cat", "pid", "tid", "ts", "dur", "external_id"])
    cpu["external_id"] = _as_ids(cpu["external_id"].where(cpu["external_id"].notna(), -1).tolist())
    gpu_ann = pd.DataFrame(gpu_ann_rows, columns=["name", "device", "stream", "ts", "dur"])
    for df in (gpu, cpu, launches, gpu_ann):
        df["ts"] = df["ts"].astype("float64")
        df["dur"] = df["dur"].astype("float64").fillna(0.0)
    cpu = cpu.astype({"cat": "category", "pid": "category", "tid": "category"})
    gpu = gpu.astype({"kind": "category"})

    meta: dict[str, Any] = {}
    for key in ("schemaVersion", "deviceProperties", "distributedInfo", "traceName", "headroom"):
        raw = getattr(doc, key)
        if len(raw):
            meta[key] = msgspec.json.decode(raw)
    return Trace(
        source=source, gpu=gpu, cpu=cpu, launches=launches, gpu_annotations=gpu_ann,
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
