"""The Kineto (torch.profiler) JSON wire format, decoded a chunk at a time.

msgspec validates the document and splits ``traceEvents`` into raw byte views;
polars parses each chunk of events into typed columns; a chunk polars cannot
read with the typed schema is decoded exactly by msgspec instead
(docs/trace-core.md, "Loader").
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import Any, Union

import msgspec
import polars as pl

from headroom.errors import UserError


class TraceError(UserError):
    """A trace that cannot be read; the message names the file and the problem."""


# --- the wire format ------------------------------------------------------------

class _TraceFile(msgspec.Struct):
    # Events stay raw (views into the input), to be parsed a chunk at a time.
    traceEvents: Union[list[msgspec.Raw], None] = None
    baseTimeNanoseconds: Union[int, None] = None
    schemaVersion: msgspec.Raw = msgspec.Raw()
    deviceProperties: msgspec.Raw = msgspec.Raw()
    distributedInfo: msgspec.Raw = msgspec.Raw()
    traceName: msgspec.Raw = msgspec.Raw()
    # headroom's own run manifest, written by `headroom profile`.
    headroom: msgspec.Raw = msgspec.Raw()


_DECODER = msgspec.json.Decoder(_TraceFile)
_CHUNK = 1 << 16

# The fields headroom reads, as polars parses them. pid/tid are strings
# because traces mix ints with names like "Spans" (polars turns numbers into
# their decimal text); everything else must have its usual JSON type.
# GPU activities (a tenth of a trace) get the args only they carry from
# msgspec instead: each field named in an args struct costs polars time on
# every event, and GPU args are long (grid, block, occupancy, ...).
_ID = pl.Int64
_EVENT_SCHEMA = {
    "ph": pl.String, "cat": pl.String, "name": pl.String, "pid": pl.String, "tid": pl.String,
    "ts": pl.Float64, "dur": pl.Float64, "id": _ID,
    "args": pl.Struct({"External id": _ID, "correlation": _ID}),
}


# The exact path: msgspec structs that accept every spelling seen in the wild.
Id = Union[int, str, None]


class _Args(msgspec.Struct, rename={"external_id": "External id"}, gc=False):
    external_id: Id = None
    correlation: Id = None
    device: Id = None
    stream: Id = None
    bytes: Union[int, float, None] = None
    # cuda_sync "Stream Wait Event" / "Event Sync": the stream and the cudaEventRecord call waited on.
    wait_on_stream: Id = None
    wait_on_cuda_event_record_corr_id: Id = None


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


class _ArgsOnly(msgspec.Struct, gc=False):
    args: Union[_Args, None] = None


_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_ARGS_DECODER = msgspec.json.Decoder(list[_ArgsOnly])
_NO_ARGS = _Args()

# Kineto renamed its categories over the years; every spelling (lower-cased)
# maps to the table the event goes to and its category there.
_TABLE_OF_CATEGORY = {
    "kernel": ("gpu", "kernel"),
    "gpu_memcpy": ("gpu", "memcpy"), "memcpy": ("gpu", "memcpy"),
    "gpu_memset": ("gpu", "memset"), "memset": ("gpu", "memset"),
    "cuda_runtime": ("launches", "cuda_runtime"), "runtime": ("launches", "cuda_runtime"),
    "cuda_driver": ("launches", "cuda_driver"), "driver": ("launches", "cuda_driver"),
    "cpu_op": ("cpu", "cpu_op"), "operator": ("cpu", "cpu_op"),
    "user_annotation": ("cpu", "user_annotation"),
    "python_function": ("cpu", "python_function"),
    "gpu_user_annotation": ("gpu_annotations", "gpu_user_annotation"),
    # CUPTI synchronization records (profiles taken with enable_cuda_sync_events).
    "cuda_sync": ("syncs", "cuda_sync"),
    # Flows link a launch to its kernel; used when a trace omits `correlation` in args.
    "ac2g": ("flows", "flow"), "async_cpu_to_gpu": ("flows", "flow"),
}
_TABLE = {cat: table for cat, (table, _) in _TABLE_OF_CATEGORY.items()}
# Tables whose device/stream/bytes args msgspec decodes (polars would pay for long GPU args on every event).
_DEVICE_TABLES = ("gpu", "gpu_annotations", "syncs")
_KIND = {cat: kind for cat, (_, kind) in _TABLE_OF_CATEGORY.items()}
# The columns each table keeps (the rest are dropped chunk by chunk).
_TABLE_COLUMNS = {
    "gpu": ["name", "kind", "pid", "tid", "ts", "dur", "device", "stream", "correlation", "external_id",
            "bytes", "index"],
    "launches": ["name", "kind", "pid", "tid", "ts", "dur", "correlation", "external_id"],
    "cpu": ["name", "kind", "pid", "tid", "ts", "dur", "external_id"],
    "gpu_annotations": ["name", "pid", "tid", "ts", "dur", "device", "stream"],
    "syncs": ["name", "pid", "tid", "ts", "dur", "device", "stream", "correlation", "wait_on_stream",
              "wait_on_cuda_event_record_corr_id"],
    "flows": ["ph", "pid", "tid", "ts", "id"],
}


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


def _id_value(v) -> int | None:
    if v is None or isinstance(v, int):
        return v
    try:
        return int(v, 0)
    except (TypeError, ValueError):
        return None


def _float_value(v) -> float | None:
    if v is None or isinstance(v, (int, float)):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _id_series(values: list) -> pl.Series:
    """Ids as Int64, or Int128 when one is beyond 64 bits."""
    try:
        return pl.Series(values, dtype=pl.Int64)
    except (OverflowError, TypeError, ValueError, pl.exceptions.PolarsError):
        pass
    try:
        return pl.Series(values, dtype=pl.Int128)
    except (OverflowError, TypeError, ValueError, pl.exceptions.PolarsError):
        raise TraceError("an id does not fit in 128 bits") from None


def _decode(path: Path) -> tuple[dict[str, pl.DataFrame], int | None, dict[str, Any]]:
    """The events headroom uses (one polars frame per table), the time base and the metadata."""
    # Kineto pretty-prints each event over several lines. A raw newline cannot
    # occur inside a JSON string, so turning them all into spaces keeps the
    # document's meaning and leaves one event per line when events are joined.
    raw = _read_bytes(path).replace(b"\n", b" ")
    try:
        doc = _DECODER.decode(raw)
    except msgspec.ValidationError as e:
        # Valid JSON of the wrong shape (e.g. a list, or traceEvents not a list).
        raise TraceError(f"{path}: not a Kineto trace ({e})") from None
    except msgspec.DecodeError as e:
        raise TraceError(f"{path}: invalid JSON ({e})") from None
    if doc.traceEvents is None:
        raise TraceError(f"{path}: not a Kineto trace (no 'traceEvents' list)")
    meta: dict[str, Any] = {}
    for key in ("schemaVersion", "deviceProperties", "distributedInfo", "traceName", "headroom"):
        value = getattr(doc, key)
        if len(value):
            meta[key] = msgspec.json.decode(value)
    raws = doc.traceEvents
    chunks = []
    for start in range(0, max(len(raws), 1), _CHUNK):
        try:
            chunks.append(_events_used(raws[start:start + _CHUNK], start))
        except TraceError as e:
            raise TraceError(f"{path}: {e}") from None
    base_ns = doc.baseTimeNanoseconds
    del doc, raws, raw
    tables = {table: pl.concat([c.pop(table) for c in chunks], how="vertical_relaxed") for table in _TABLE_COLUMNS}
    return tables, base_ns, meta


def _events_used(raws: list[msgspec.Raw], start: int) -> dict[str, pl.DataFrame]:
    """One chunk of events, parsed and split by table (each event numbered by its position in traceEvents)."""
    try:
        parts = _split_by_table(_typed_events(raws), start)
        for table in _DEVICE_TABLES:
            positions = (parts[table]["index"] - start).to_list()
            parts[table] = pl.concat([parts[table], _device_args([raws[i] for i in positions])], how="horizontal")
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException, ValueError, msgspec.ValidationError):
        parts = _split_by_table(_exact_events(raws, start), start)
    return {table: parts[table].select(columns) for table, columns in _TABLE_COLUMNS.items()}


def _split_by_table(frame: pl.DataFrame, start: int) -> dict[str, pl.DataFrame]:
    frame = frame.with_row_index("index", offset=start)
    # A chunk holds a handful of distinct category spellings: split by those,
    # then label each part, instead of mapping every row's lower-cased copy.
    spellings = [c for c in frame["cat"].unique().to_list() if c is not None and c.lower() in _TABLE]
    flow_spellings = [c for c in spellings if _TABLE[c.lower()] == "flows"]
    range_spellings = [c for c in spellings if c not in flow_spellings]
    # Ranges are complete ("X") events; flows are start/step/finish events.
    frame = frame.filter((pl.col("ph") == "X") & pl.col("cat").is_in(range_spellings)
                         | pl.col("ph").is_in(["s", "f", "t"]) & pl.col("cat").is_in(flow_spellings))
    by_table: dict[str, list[pl.DataFrame]] = {table: [] for table in _TABLE_COLUMNS}
    for (spelling,), part in frame.partition_by("cat", as_dict=True).items():
        by_table[_TABLE[spelling.lower()]].append(part.with_columns(kind=pl.lit(_KIND[spelling.lower()])))
    empty = frame.clear().with_columns(kind=pl.lit(None, dtype=pl.String))
    return {table: pl.concat(parts) if parts else empty for table, parts in by_table.items()}


def _typed_events(raws: list[msgspec.Raw]) -> pl.DataFrame:
    # One event per line: the input's newlines became spaces in `_decode`.
    frame = pl.read_ndjson(io.BytesIO(b"\n".join(raws)), schema=_EVENT_SCHEMA)
    if frame.height != len(raws):
        raise ValueError("polars read a different number of events")
    return frame.unnest("args").rename({"External id": "external_id"})


def _json_array(raws: list[msgspec.Raw]) -> bytes:
    return b"[" + b",".join(raws) + b"]"


def _device_args(raws: list[msgspec.Raw]) -> pl.DataFrame:
    """device, stream, bytes (and what a sync waits on) of the events that run on a device."""
    events = _ARGS_DECODER.decode(_json_array(raws))
    return pl.DataFrame(_device_arg_columns([_NO_ARGS if e.args is None else e.args for e in events]))


def _small_id_series(values: list) -> pl.Series:
    return _id_series([_id_value(v) for v in values]).cast(pl.Int64, strict=False)


def _device_arg_columns(args: list[_Args]) -> dict[str, pl.Series]:
    # Hex text ("0x0": ROCm's streams) parses like int(text, 0).
    return {"device": _small_id_series([a.device for a in args]),
            "stream": _small_id_series([a.stream for a in args]),
            "bytes": pl.Series([_float_value(a.bytes) for a in args], dtype=pl.Float64),
            "wait_on_stream": _small_id_series([a.wait_on_stream for a in args]),
            "wait_on_cuda_event_record_corr_id": _id_series([_id_value(a.wait_on_cuda_event_record_corr_id)
                                                             for a in args])}


def _exact_events(raws: list[msgspec.Raw], start: int) -> pl.DataFrame:
    """The same columns as `_typed_events`, decoded by msgspec (string timestamps, hex or huge ids)."""
    try:
        events = _EVENTS_DECODER.decode(_json_array(raws))
    except msgspec.ValidationError as e:
        raise TraceError(f"not a Kineto trace (an event near position {start} is malformed: {e})") from None
    args = [_NO_ARGS if e.args is None else e.args for e in events]
    return pl.DataFrame({
        "ph": pl.Series([e.ph for e in events], dtype=pl.String),
        "cat": pl.Series([e.cat for e in events], dtype=pl.String),
        "name": pl.Series([e.name for e in events], dtype=pl.String),
        "pid": pl.Series([str(e.pid) for e in events], dtype=pl.String),
        "tid": pl.Series([str(e.tid) for e in events], dtype=pl.String),
        "ts": pl.Series([_float_value(e.ts) for e in events], dtype=pl.Float64),
        "dur": pl.Series([_float_value(e.dur) for e in events], dtype=pl.Float64),
        "id": _id_series([_id_value(e.id) for e in events]),
        "external_id": _id_series([_id_value(a.external_id) for a in args]),
        "correlation": _id_series([_id_value(a.correlation) for a in args]),
        **_device_arg_columns(args),
    })
