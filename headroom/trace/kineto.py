"""The Kineto (torch.profiler) JSON wire format, decoded a chunk at a time.

``document`` reads the file in blocks (gunzipped on the fly) and cuts it between two events of
``traceEvents``; ``scan`` decodes each chunk by the C scanner, and those it declines are decoded here
by msgspec straight into typed structs and turned into the same polars columns, keeping only the
fields and events headroom uses (the routes and tables both paths share are here). A chunk with odd
spellings (a timestamp written as a string, hex or beyond-64-bit ids) is decoded event by event into
lenient structs and
normalised into the same values; an event no spelling fits is counted, never
dropped silently. Big files are split between this process and one worker
process (docs/trace-core.md, "Load").
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

import lazy_loader
import msgspec
import numpy as np

from headroom.errors import UserError
from headroom.trace import schema
from headroom.trace.inputs import module_inputs
from headroom.trace.ranges import MODULE_PREFIX

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_loader.load("polars")  # imported on first use (a cached analysis needs none)


class TraceError(UserError):
    """A trace that cannot be read; the message names the file and the problem."""


# --- the wire format (the structs: schema.py) ---------------------------------------------
# EVENTS, fast_chunk and lenient_chunk are public so that a test can count which path a chunk took.


class EventArgs(Protocol):
    """What the loader reads by name of a decoded event's args (a schema.FastArgs; its other fields, the
    schema's rows, are read by column name)."""

    @property
    def dims(self) -> msgspec.Raw: ...

    @property
    def types(self) -> msgspec.Raw: ...


class Event(Protocol):
    """A decoded event: a schema.FastEvent (a struct made at import from the schema's rows, so its type is
    known to msgspec, not to mypy); the fields read by name."""

    @property
    def ph(self) -> str: ...

    @property
    def cat(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def args(self) -> EventArgs: ...


class _CategoryOnly(msgspec.Struct, gc=False):
    cat: Any = None


EVENTS = msgspec.json.Decoder(list[schema.FastEvent])
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_ONE_LOOSE = msgspec.json.Decoder(schema.LooseEvent)
_ONE_CATEGORY = msgspec.json.Decoder(_CategoryOnly)

# Kineto renamed its categories over the years; every spelling (lower-cased)
# maps to the table the event goes to and its kind there.
TABLE_OF_CATEGORY = {
    "kernel": ("gpu", "kernel"),
    "gpu_memcpy": ("gpu", "memcpy"),
    "memcpy": ("gpu", "memcpy"),
    "gpu_memset": ("gpu", "memset"),
    "memset": ("gpu", "memset"),
    "cuda_runtime": ("launches", "cuda_runtime"),
    "runtime": ("launches", "cuda_runtime"),
    "cuda_driver": ("launches", "cuda_driver"),
    "driver": ("launches", "cuda_driver"),
    "cpu_op": ("cpu", "cpu_op"),
    "operator": ("cpu", "cpu_op"),
    "user_annotation": ("cpu", "user_annotation"),
    "python_function": ("cpu", "python_function"),
    "gpu_user_annotation": ("gpu_annotations", "gpu_user_annotation"),
    # CUPTI synchronization records (profiles taken with enable_cuda_sync_events).
    "cuda_sync": ("syncs", "cuda_sync"),
    # Flows: launch -> kernel (used when a trace omits `correlation`), forward op -> backward op.
    "ac2g": ("flows", "ac2g"),
    "async_cpu_to_gpu": ("flows", "ac2g"),
    "fwdbwd": ("flows", "fwdbwd"),
}
GPU_CATEGORIES = frozenset(c for c, (t, _) in TABLE_OF_CATEGORY.items() if t == "gpu")
TABLES = schema.TABLES
TABLE_COLUMNS = schema.TABLE_COLUMNS  # the columns each table keeps
_FLOW_PHASES = frozenset("sft")


class _Routes(dict):
    """(ph, cat) -> a small code; `table[code]`/`kind[code]`/`ph[code]` say where events of that code go
    (table None: no analysis reads them; "?": no 'ph', an event that cannot be read). Filled on first sight."""

    def __init__(self) -> None:
        super().__init__()
        self.table: list[str | None] = []
        self.kind: list[str | None] = []
        self.ph: list[str] = []
        self._held: dict[str, tuple[int, Any]] = {}  # _per_code's values, with the route count they are for

    def __missing__(self, key) -> int:
        ph, cat = key
        table_kind = TABLE_OF_CATEGORY.get(cat.lower())
        if table_kind is not None and not (ph == "X" if table_kind[0] != "flows" else ph in _FLOW_PHASES):
            table_kind = None
        code = len(self.table)
        self.table.append("?" if not ph else table_kind[0] if table_kind else None)
        self.kind.append(table_kind[1] if table_kind else None)
        self.ph.append(ph)
        self[key] = code
        return code

    def table_numbers(self) -> np.ndarray:
        """Per code, the position of its table in TABLES (-1: none, -2: unreadable)."""
        return self._per_code(
            "tables",
            lambda: np.array(
                [TABLES.index(t) if t in TABLES else -2 if t == "?" else -1 for t in self.table], dtype=np.int8
            ),
        )

    def python_functions(self) -> np.ndarray:
        """Per code, whether its events are python_function ones (only their nn.Module ones are read)."""
        return self._per_code("python", lambda: np.array([k == "python_function" for k in self.kind], dtype=bool))

    def texts(self, which: str, codes: np.ndarray) -> pl.Series:
        """The kind (or ph) of each event, from its code: a categorical column, one integer gather (a
        string column would copy the text of every row: 0.7 s of the 2 GB trace's decode)."""
        values = self._per_code(
            which, lambda: pl.Series(self.kind if which == "kind" else self.ph, dtype=pl.String).cast(pl.Categorical)
        )
        return values[codes]  # (indexing by an array: a quarter of .gather's time on 13,000 rows)

    def _per_code(self, name: str, build):
        """`build()`, kept until a new route is added (every chunk asks; routes are a handful)."""
        held = self._held.get(name)
        if held is None or held[0] != len(self.table):
            held = (len(self.table), build())
            self._held[name] = held
        return held[1]


ROUTES = _Routes()


# --- decoding one chunk of events ----------------------------------------------------


@dataclass
class Chunk:
    """One decoded chunk: its tables (event index counted from the chunk's first event), and what it could not read."""

    tables: dict[str, pl.DataFrame]
    events: int
    unreadable: Counter = field(default_factory=Counter)
    first_unreadable: tuple[int, str] | None = None
    gpu_unreadable: list[tuple[int, str]] = field(default_factory=list)  # (index, problem): refused unless lenient
    cut_error: bool = False  # the chunk did not end between two events (or the document ended early)
    json_error: tuple[int, str] | None = None  # (byte offset in the chunk, msgspec's words)
    error: str | None = None  # any other reason the chunk cannot be read
    files: dict[str, str] = field(default_factory=dict)  # tables written to Arrow files (chunks.spill)


# Where msgspec's error message says the problem is (document.py words whole-document errors with it too).
BYTE_OFFSET = re.compile(r"\(byte (\d+)\)")


def decode_events(doc: bytes | memoryview) -> Chunk:
    """The events of `doc`, a JSON array of consecutive events of traceEvents, by msgspec (the loader asks
    `scan.decode_events`, which asks this for the chunks the C scanner declines)."""
    try:
        return _decode_events(doc)
    except TraceError as e:  # e.g. an id beyond 128 bits
        return Chunk({}, 0, error=str(e))


def _decode_events(doc: bytes | memoryview) -> Chunk:
    try:
        return fast_chunk(EVENTS.decode(doc))
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as e:
        return _json_problem(e, len(doc))
    except RecursionError:
        return Chunk({}, 0, json_error=(0, "objects nested too deeply"))
    try:
        raws = _RAWS.decode(doc)
    except msgspec.DecodeError as e:
        return _json_problem(e, len(doc))
    except RecursionError:
        return Chunk({}, 0, json_error=(0, "objects nested too deeply"))
    return lenient_chunk(raws)


def _json_problem(e: msgspec.DecodeError, length: int) -> Chunk:
    if "UTF-8" in str(e):
        return Chunk({}, 0, json_error=(-1, "invalid UTF-8 in a string"))
    m = BYTE_OFFSET.search(str(e))
    # The array starts between two events, so everything before its closing bracket is the
    # document's own text: an error there is the document's; one at the bracket (or past the
    # end) means the cut, or the document's end, is not where it was taken to be.
    if m and int(m.group(1)) < length - 1:
        return Chunk({}, 0, json_error=(int(m.group(1)), str(e).split(" (byte")[0]))
    return Chunk({}, 0, cut_error=True)


def fast_chunk(events: list[Event]) -> Chunk:
    """A chunk's tables from events msgspec decoded with the typed structs in one go (the common path)."""
    chunk = Chunk({}, len(events))
    chunk.tables = _split_tables(events, np.arange(len(events), dtype=np.int64), chunk)
    return chunk


def _split_tables(events: list[Event], positions: np.ndarray, chunk: Chunk) -> dict[str, pl.DataFrame]:
    """Route each event to its table by (ph, cat), vectorised over codes; build each table's columns."""
    codes = np.fromiter(
        map(ROUTES.__getitem__, zip(map(_GET["ph"], events), map(_GET["cat"], events))),
        dtype=np.int32,
        count=len(events),
    )
    table_of = ROUTES.table_numbers()[codes]
    tables = {}
    for number, t in enumerate(TABLES):
        rows = np.flatnonzero(table_of == number)
        mine = list(map(events.__getitem__, rows.tolist()))
        if t == "cpu" and mine:
            mine, rows = _without_plain_python_functions(mine, rows, codes)
        tables[t] = _table(t, mine, codes[rows], positions[rows])
    for i in np.flatnonzero(table_of == -2).tolist():
        count_unreadable(chunk, int(positions[i]), "no 'ph' (event type)", events[i].cat)
    return tables


def _without_plain_python_functions(events: list[Event], rows: np.ndarray, codes: np.ndarray):
    """python_function events are the bulk of a with_stack trace; only nn.Module ones are read."""
    python = ROUTES.python_functions()[codes[rows]]
    if not python.any():
        return events, rows
    keep = ~python
    for i in np.flatnonzero(python).tolist():
        keep[i] = events[i].name.startswith(MODULE_PREFIX)
    kept = np.flatnonzero(keep)
    return list(map(events.__getitem__, kept.tolist())), rows[kept]


def count_unreadable(chunk: Chunk, index: int, problem: str, category: Any) -> None:
    if isinstance(category, str) and category.lower() in GPU_CATEGORIES:
        chunk.gpu_unreadable.append((index, problem))
        return
    chunk.unreadable[problem] += 1
    if chunk.first_unreadable is None:
        chunk.first_unreadable = (index, problem)


def lenient_chunk(raws: list[msgspec.Raw]) -> Chunk:
    """Event by event: each decoded with the lenient structs and normalised to the fast path's values."""
    events: list[Event] = []
    positions: list[int] = []
    chunk = Chunk({}, len(raws))
    for i, raw in enumerate(raws):
        try:
            e = _ONE_LOOSE.decode(raw)
        except msgspec.ValidationError as err:
            try:
                category = _ONE_CATEGORY.decode(raw).cat
            except msgspec.ValidationError:
                category = None  # not an object
            count_unreadable(chunk, i, _problem(err), category)
            continue
        events.append(_normalised(e))
        positions.append(i)
    chunk.tables = _split_tables(events, np.asarray(positions, dtype=np.int64), chunk)
    return chunk


def _problem(err: msgspec.ValidationError) -> str:
    text = str(err)
    if " - at `" in text:
        what, where = text.split(" - at `", 1)
        where = where.rstrip("`")
        return f"{where.replace('$.', '', 1) if where != '$' else 'the event'}: {what[0].lower()}{what[1:]}"
    return f"the event: {text[0].lower()}{text[1:]}"


def _normalised(e: Any) -> Event:
    a = e.args
    args = (
        schema.NO_ARGS
        if a is None
        else schema.FastArgs(**{f.column: _VALUE_OF[f.type](getattr(a, f.column)) for f in schema.ARG_FIELDS})
    )
    return schema.FastEvent(
        **{f.column: _VALUE_OF[f.type](getattr(e, f.column)) for f in schema.EVENT_FIELDS}, args=args
    )


def _id_value(v) -> int | None:
    if v is None or isinstance(v, int):
        return v
    try:
        return int(v, 0)  # hex text ("0x0": ROCm's streams) parses like int(text, 0)
    except (TypeError, ValueError):
        return None


def _float_value(v) -> float | None:
    """A number as the fast path gives it: a float; text that is no number becomes NaN (refused for GPU time)."""
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return float("nan")


def _same(v):
    return v


# How the lenient path normalises a value of each schema type into the fast path's.
_VALUE_OF = {
    "text": _same,
    "thread": _same,
    "raw": _same,
    "time": _float_value,
    "number": _float_value,
    "id": _id_value,
    "small_id": _id_value,
}


def id_series(values: list) -> pl.Series:
    """Ids as Int64, or Int128 when one is beyond 64 bits."""
    try:
        return pl.Series(values, dtype=pl.Int64)
    except (OverflowError, TypeError, ValueError, pl.exceptions.PolarsError):
        pass
    try:
        return pl.Series(values, dtype=pl.Int128)
    except (OverflowError, TypeError, ValueError, pl.exceptions.PolarsError):
        raise TraceError("an id does not fit in 128 bits") from None


def _text_series(values: list) -> pl.Series:
    """pid/tid: Int64 while every one is a number, else text (traces mix numbers with names such as
    "Spans"); tables.py turns both into the same categories of text."""
    try:
        return pl.Series(values, dtype=pl.Int64)
    except (OverflowError, TypeError, ValueError, pl.exceptions.PolarsError):
        return pl.Series(list(map(str, values)), dtype=pl.String)


_GET = {f.column: attrgetter(f.column) for f in schema.EVENT_FIELDS}
_GET_ARG = {f.column: attrgetter(f"args.{f.column}") for f in schema.ARG_FIELDS}


def empty_table(table: str) -> pl.DataFrame:
    return pl.DataFrame(schema={c: getattr(pl, schema.POLARS_TYPES[c]) for c in TABLE_COLUMNS[table]})


def table_frame(table: str, codes: np.ndarray, index: np.ndarray, column) -> pl.DataFrame:
    """A table's columns: kind/ph from the route `codes`, `index` (positions in the chunk), the rest by
    `column(name, columns so far)` (from structs or from the C scanner's columns)."""
    out: dict[str, pl.Series] = {}
    for c in TABLE_COLUMNS[table]:
        if c in ("kind", "ph"):
            out[c] = ROUTES.texts(c, codes)
        elif c == "index":
            out[c] = pl.Series(index, dtype=pl.Int64)
        else:
            out[c] = column(c, out)
    return pl.DataFrame(out)


def _table(table: str, events: list[Event], codes: np.ndarray, index: np.ndarray) -> pl.DataFrame:
    """The table's columns from its events (`codes`: their routes, `index`: their positions in the chunk)."""
    if not events:
        return empty_table(table)

    def column(c: str, out: dict[str, pl.Series]) -> pl.Series:
        if c in ("pid", "tid"):
            return _text_series(list(map(_GET[c], events)))
        if c in ("ts", "dur"):
            return pl.Series(list(map(_GET[c], events)), dtype=pl.Float64)
        if c == "name":
            return pl.Series(list(map(_GET[c], events)), dtype=pl.String)
        if c == "id":
            return id_series(list(map(_GET[c], events)))
        if c == "inputs":
            return module_inputs(out["name"], lambda row: (events[row].args.dims, events[row].args.types))
        values = list(map(_GET_ARG[c], events))
        return (
            pl.Series(values, dtype=pl.Float64)
            if c == "bytes"
            else id_series(values).cast(pl.Int64, strict=False)
            if c in schema.SMALL_IDS
            else id_series(values)
        )

    return table_frame(table, codes, index, column)
