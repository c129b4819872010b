"""A chunk of traceEvents decoded by the C scanner (headroom/trace/_scan.c) into the tables kineto's msgspec
paths build; a chunk the scanner declines is decoded by them (docs/trace-core.md, "Load").

The scanner accepts a strict subset of what msgspec's typed structs accept (valid JSON in Kineto's own
types: no id beyond 64 bits, escaped key, lone surrogate, number out of range) and gives the same values
for it, so msgspec decides and words every error and both give the same tables (tests/test_scan.py). It
returns an array per field of every event, names and (ph, cat) pairs as codes of the distinct ones it
keeps; here they are routed to their tables and wrapped as polars columns.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lazy_loader
import numpy as np

from headroom.trace import kineto
from headroom.trace.inputs import module_inputs_text
from headroom.trace.kineto import ROUTES, TABLES, Chunk, count_unreadable, empty_table, table_frame
from headroom.trace.ranges import MODULE_PREFIX, MODULE_RANGE_PREFIX

try:  # built by `pip install -e .` (make setup)
    from headroom.trace import _scan  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a copy without it (no compiler; the GPU machine's) decodes by msgspec
    _scan = None
# The C extension module (None where it was not built).
EXTENSION = _scan

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_loader.load("polars")  # imported on first use (a cached analysis needs none)


def decode_events(doc: bytes | memoryview) -> Chunk:
    """The events of `doc`, a JSON array of consecutive events of traceEvents: by the scanner, or by msgspec
    where it declines."""
    with RUN:
        scanner = _scanner()
        scanned = scanner.scan(doc) if scanner is not None else None
        if scanned is None:
            return kineto.decode_events(doc)
        return _chunk(doc, _codes_of(scanner), *scanned)


# One thread's chunks at a time use the process's scanner and its codes (the scan runs without the GIL, so
# two threads' loads would otherwise meet in it): held for a chunk, or for a whole run scanned ahead.
RUN = threading.RLock()


@dataclass
class Pending:
    """A chunk whose scan runs in the scan-ahead thread (`scanned`: None where there is no scanner)."""

    doc: bytes | memoryview
    scanner: Any
    scanned: Future | None


class ScanAhead:
    """A run of chunks decoded in order, each one's scan (C, without the GIL) in a thread while this thread
    makes the previous one's tables: `start` the next chunk, then `finish` the one before it."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self.pool = pool

    def start(self, doc: bytes | memoryview) -> Pending:
        # A view of its own: the source (document.split) releases the chunk's view when the next is asked for
        # and, finding the buffer still exported, leaves this chunk its bytes.
        doc = memoryview(doc)
        scanner = _scanner()
        if scanner is None:
            return Pending(doc, None, None)
        started = threading.Event()

        def scan() -> Any:
            started.set()
            return scanner.scan(doc)

        scanned = self.pool.submit(scan)
        # Waiting lends the thread the GIL now, to enter the scan (which gives it back), rather than at this
        # thread's next switch (every 5 ms: most of a chunk's tables).
        started.wait()
        return Pending(doc, scanner, scanned)

    def finish(self, pending: Pending) -> Chunk:
        scanned = pending.scanned.result() if pending.scanned is not None else None
        if scanned is None:
            return kineto.decode_events(pending.doc)
        return _chunk(pending.doc, _codes_of(pending.scanner), *scanned)


@contextmanager
def scanning_ahead() -> Iterator[ScanAhead]:
    """A ScanAhead for one run of chunks; at the end (an error included) the scan in flight is waited for."""
    with RUN:
        pool = ThreadPoolExecutor(1, thread_name_prefix="headroom-scan")
        try:
            yield ScanAhead(pool)
        finally:
            pool.shutdown(wait=True)


SCANNER = _scan.Scanner() if _scan is not None else None
# Bits of the scanner's `present` column: which integer fields an event has (else null), in the order of its
# key table (_scan_keys.h, generated from headroom/data/kineto.toml).
PRESENT_BIT = {c: bit for bit, c in enumerate(_scan.INT_COLUMNS)} if _scan is not None else {}
DOUBLES = frozenset(_scan.DOUBLE_COLUMNS) if _scan is not None else frozenset()
# The scanner's columns' types (the rest are int64).
TYPES = {
    "pair": np.int32,
    "name": np.int32,
    "present": np.uint16,
    **{c: np.float64 for c in DOUBLES},
    **({f"{c}_text": np.int32 for c in _scan.THREAD_COLUMNS} if _scan is not None else {}),
}
# A scanner keeps every distinct name it met; one that met this many starts afresh (a long-lived process).
NAMES_MAX = 1 << 20
# The distinct module inputs remembered (a bound on the memory of a long-lived process).
INPUTS_MAX = 1 << 16


class _Codes:
    """Per code of a scanner's pairs and names: the route, the name as a polars value, and whether it is an
    nn.Module or a module range name (grown as the scanner meets new ones)."""

    def __init__(self, scanner) -> None:
        self.scanner = scanner
        self.routes = np.empty(0, dtype=np.int32)
        self.names: Any = None  # a polars Series (made on first use: a cached analysis imports no polars)
        self.empty_text: Any = None
        self.modules = np.empty(0, dtype=bool)
        self.module_ranges = np.empty(0, dtype=bool)
        self.inputs: dict[tuple[bytes, bytes], str] = {}

    def inputs_text(self, dims: bytes, types: bytes) -> str:
        """A module range's `inputs` text, decoded once per distinct raw `Input Dims`/`Input type` (a model
        calls its modules with the same shapes step after step: decoding each was the larger part of the
        scanner path's Python time on the training shape)."""
        text = self.inputs.get((dims, types))
        if text is None:
            if len(self.inputs) >= INPUTS_MAX:
                self.inputs.clear()
            text = self.inputs[(dims, types)] = module_inputs_text(dims, types)
        return text

    def grow(self) -> None:
        """Take in the pairs and names the scanner met since the last call."""
        pairs, names = self.scanner.pairs, self.scanner.names
        if len(self.routes) != len(pairs):
            self.routes = np.array([ROUTES[p] for p in pairs], dtype=np.int32)
        if self.names is None:
            self.names, self.empty_text = pl.Series([], dtype=pl.String), pl.Series([""], dtype=pl.String)
        if len(self.names) == len(names):
            return
        new = names[len(self.names) :]
        # appended as a chunk, put in one piece now and then (a with_stack trace meets new names in every chunk)
        self.names = pl.concat([self.names, pl.Series(new, dtype=pl.String)], rechunk=self.names.n_chunks() > 16)
        self.modules = np.concatenate([self.modules, [n.startswith(MODULE_PREFIX) for n in new]]).astype(bool)
        self.module_ranges = np.concatenate(
            [self.module_ranges, [n.startswith(MODULE_RANGE_PREFIX) for n in new]]
        ).astype(bool)


CODES: _Codes | None = None


def _scanner():
    """The process's scanner (a fresh one once it holds too many names); None: decode by msgspec."""
    global SCANNER
    if SCANNER is not None and len(SCANNER.names) > NAMES_MAX:
        SCANNER = _scan.Scanner()
    return SCANNER


def _codes_of(scanner) -> _Codes:
    global CODES
    codes = CODES
    if codes is None or codes.scanner is not scanner:
        codes = CODES = _Codes(scanner)
    return codes


def _chunk(doc: bytes | memoryview, known: _Codes, events: int, columns: dict[str, bytes]) -> Chunk:
    a = {k: np.frombuffer(v, dtype=TYPES.get(k, np.int64)) for k, v in columns.items()}
    known.grow()
    codes = known.routes[a["pair"]]
    table_of = ROUTES.table_numbers()[codes]
    chunk = Chunk({}, events)
    for number, t in enumerate(TABLES):
        rows = np.flatnonzero(table_of == number)
        if t == "cpu" and len(rows):
            python = ROUTES.python_functions()[codes[rows]]
            if python.any():  # only nn.Module python_function events are read
                rows = rows[~python | known.modules[a["name"][rows]]]
        chunk.tables[t] = _table(t, doc, a, rows, codes[rows], known)
    if (table_of == -2).any():
        pairs = known.scanner.pairs
        for i in np.flatnonzero(table_of == -2).tolist():
            count_unreadable(chunk, i, "no 'ph' (event type)", pairs[a["pair"][i]][1])
    return chunk


def _table(
    table: str, doc, a: dict[str, np.ndarray], rows: np.ndarray, codes: np.ndarray, known: _Codes
) -> pl.DataFrame:
    """The same columns kineto's `_table` builds from structs, from the scanner's columns at `rows`. (polars'
    Series methods that run as expressions carry a fixed cost per call, hundreds of calls per chunk: these index.)"""
    if not len(rows):
        return empty_table(table)

    def column(c: str, out: dict[str, pl.Series]) -> pl.Series:
        if c == "name":
            return known.names[a["name"][rows]]
        if c in ("pid", "tid"):
            text = a[f"{c}_text"][rows]
            if (text >= 0).any():  # a name ("Spans") among the numbers: all as text, as _text_series makes them
                names = known.scanner.names
                values = a[c][rows].tolist()
                return pl.Series(
                    [names[n] if n >= 0 else str(v) for n, v in zip(text.tolist(), values)], dtype=pl.String
                )
            return pl.Series(a[c][rows], dtype=pl.Int64)
        if c in DOUBLES:
            values = a[c][rows]
            return _with_nulls(values, np.isnan(values), pl.Float64)
        if c == "inputs":
            ranges = np.flatnonzero(known.module_ranges[a["name"][rows]])
            if not len(ranges):
                return known.empty_text.new_from_index(0, len(rows))
            texts = [""] * len(rows)
            at = rows[ranges]
            spans = zip(*(a[k][at].tolist() for k in ("dims_at", "dims_len", "types_at", "types_len")))
            for i, (dims, dims_len, types, types_len) in zip(ranges.tolist(), spans):
                texts[i] = known.inputs_text(bytes(doc[dims : dims + dims_len]), bytes(doc[types : types + types_len]))
            return pl.Series(texts, dtype=pl.String)
        return _with_nulls(a[c][rows], (a["present"][rows] & (1 << PRESENT_BIT[c])) == 0, pl.Int64)

    return table_frame(table, codes, rows, column)


def _with_nulls(values: np.ndarray, absent: np.ndarray, dtype) -> pl.Series:
    return pl.Series(np.ma.masked_array(values, mask=absent) if absent.any() else values, dtype=dtype)
