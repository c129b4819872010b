"""A run of chunks decoded, each checked, and merged into one: the loader's and its worker's common part.

A file is decoded as one run of chunks (``document.split``), or as two halves side by side: the
first in the loading process, the second in the worker process (``document.halves``,
``decode_second_half``), merged in file order. Nothing here imports pandas, so the worker starts in
the time the loader reads its first blocks.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import lazy_loader
import numpy as np

from headroom.trace import document, kineto, scan
from headroom.trace.document import Document
from headroom.trace.kineto import Chunk, TraceError

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_loader.load("polars")  # imported on first use (a cached analysis needs none)


def decode_chunks(
    path: Path,
    source: Iterable,
    helper=None,
    check_memory: Callable[[Path], None] | None = None,
    ahead: bool = False,
) -> tuple[list[Chunk], Document | None]:
    """Decode every chunk of `source` (document.split and its kin); the Document ends it (None: the source
    was a first half). With a worker (`helper`), chunks alternate: one sent to it, the next decoded here.
    `ahead` (no worker): each chunk scanned in a thread while this one makes the previous chunk's tables."""
    if ahead and helper is None and scan.EXTENSION is not None:
        return _decode_ahead(path, source, check_memory)
    chunks: list[Chunk] = []
    waiting: int | None = None  # offset of the chunk the worker holds
    for item in source:
        if isinstance(item, Document):
            if waiting is not None:
                keep(path, chunks, from_worker(helper), waiting)
            return chunks, item
        data, offset = item
        if helper is not None and waiting is None:
            helper.submit(data)
            waiting = offset
            continue
        local = scan.decode_events(data)
        del data
        if waiting is not None:
            keep(path, chunks, from_worker(helper), waiting)
            waiting = None
        keep(path, chunks, local, offset)
        if check_memory is not None:
            check_memory(path)
    if waiting is not None:
        keep(path, chunks, from_worker(helper), waiting)
    return chunks, None


def _decode_ahead(
    path: Path, source: Iterable, check_memory: Callable[[Path], None] | None
) -> tuple[list[Chunk], Document | None]:
    """decode_chunks with the next chunk's scan running beside this chunk's tables (scan.ScanAhead): the same
    chunks in the same order (the scans run one at a time, in file order)."""
    chunks: list[Chunk] = []
    with scan.scanning_ahead() as ahead:
        pending: tuple[scan.Pending, int] | None = None
        for item in source:
            if isinstance(item, Document):
                if pending is not None:
                    keep(path, chunks, ahead.finish(pending[0]), pending[1])
                return chunks, item
            data, offset = item
            started = (ahead.start(data), offset)
            del data
            if pending is not None:
                keep(path, chunks, ahead.finish(pending[0]), pending[1])
                if check_memory is not None:
                    check_memory(path)
            pending = started
        if pending is not None:
            keep(path, chunks, ahead.finish(pending[0]), pending[1])
    return chunks, None


def from_worker(helper, last: bool = True):
    """The worker's next answer (`last=False`: more follow); an error it sent back is raised here, as this
    process's own."""
    try:
        result = helper.result(last)
    except (EOFError, OSError, pickle.UnpicklingError) as e:
        raise TraceError(
            f"the loader's worker process failed ({e}); HEADROOM_LOAD_WORKERS=0 loads without it"
        ) from None
    if isinstance(result, Exception):
        raise result
    return result


def keep(path: Path, chunks: list[Chunk], chunk: Chunk, offset: int) -> None:
    raise_for(path, chunk, offset)
    chunks.append(chunk)


def raise_for(path: Path, chunk: Chunk, offset: int) -> None:
    if chunk.cut_error:
        if offset < 0:  # events of a document already decoded whole cannot be cut wrong
            raise TraceError(f"{path}: invalid JSON (an event of traceEvents could not be decoded)")
        raise document.Fallback()
    if chunk.error is not None:
        raise TraceError(f"{path}: {chunk.error}")
    if chunk.json_error is not None:
        at, words = chunk.json_error
        where = f" near byte {offset + at}" if offset >= 0 and at >= 0 else ""
        raise TraceError(f"{path}: invalid JSON ({words}{where})")


def merged(path: Path, chunks: list[Chunk], freed: Callable[[], None] | None = None) -> Chunk:
    """The chunks as one, in order: each table concatenated, event indexes counted from the first chunk's start.
    `freed`: called after each column is put in one piece and its chunks' pieces let go (the loader gives the
    C heap's free pages back then: `parallel.trim_heap`)."""
    parts: dict[str, list[pl.DataFrame]] = {t: [] for t in kineto.TABLES}
    starts: dict[str, list[tuple[int, int]]] = {t: [] for t in kineto.TABLES}  # (chunk's first event, rows)
    out = Chunk({}, 0, Counter())
    for chunk in chunks:
        first = out.events
        for table, frame in chunk.tables.items():
            if frame.height:
                parts[table].append(frame)
                starts[table].append((first, frame.height))
        out.unreadable.update(chunk.unreadable)
        if out.first_unreadable is None and chunk.first_unreadable is not None:
            out.first_unreadable = (chunk.first_unreadable[0] + first, chunk.first_unreadable[1])
        out.gpu_unreadable += [(i + first, p) for i, p in chunk.gpu_unreadable]
        out.events += chunk.events
        chunk.tables = {}
    for table in kineto.TABLES:
        frames, parts[table] = parts[table] or [kineto.empty_table(table)], []
        if len({f.schema["pid"] for f in frames} | {f.schema["tid"] for f in frames}) > 1:
            # numbers in some chunks, names ("Spans") in others: text everywhere
            frames = [f.with_columns(pl.col("pid", "tid").cast(pl.String)) for f in frames]
        try:
            whole = in_one_piece(frames, freed)
        except pl.exceptions.PolarsError as e:  # pragma: no cover - the columns are typed per table
            raise TraceError(f"{path}: cannot combine the {table} table ({e})") from None
        if any(first for first, _ in starts[table]):
            # each chunk counted its events from 0: one addition for the table, not one query per chunk
            shift = np.repeat([first for first, _ in starts[table]], [rows for _, rows in starts[table]])
            whole = whole.with_columns(pl.Series("index", whole["index"].to_numpy() + shift, dtype=pl.Int64))
        out.tables[table] = whole
    return out


def in_one_piece(frames: list[pl.DataFrame], freed: Callable[[], None] | None = None) -> pl.DataFrame:
    """The frames stacked, each column in one piece (`frames` is emptied). polars puts a table of many pieces
    (one per chunk) in one piece before most operations on it, a copy each time: on the 4 GB trace's CPU
    table (971 pieces) 0.24 s and 0.47 GB for every filter of the checks. A column at a time, each column's
    pieces let go once copied, so no table is held twice."""
    whole = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical_relaxed", rechunk=False)
    frames.clear()
    for name in whole.columns:
        if whole[name].n_chunks() > 1:
            whole = whole.with_columns(whole[name].rechunk())
            if freed is not None:
                freed()
    return whole


# The second half's outcome when its cut proved wrong: the loader decodes the file as one run instead.
CUT_WRONG = "cut"
# The second half is merged in parts of this many chunks (64 MB of text), each sent on its own, so that
# neither process ever holds the whole half twice (docs/benchmarks.md: the 2 GB trace).
PART_CHUNKS = 16


def decode_second_half(
    path: Path, start: int, prefix: bytes, finish: Callable[[Chunk], Chunk] = lambda part: part
) -> tuple[list[Chunk], Document] | str:
    """The worker's half (document.split_from): its chunks merged in parts, each passed through `finish`
    as it is made (the worker spills it), and the Document; CUT_WRONG when the file cannot be streamed
    from `start` (raises TraceError for an unreadable event, as the loader would)."""
    parts: list[Chunk] = []
    run: list[Chunk] = []
    try:
        for item in document.split_from(path, start, prefix):
            if isinstance(item, Document):
                if run:
                    parts.append(finish(merged(path, run)))
                return parts, item
            data, offset = item
            keep(path, run, scan.decode_events(data), offset)
            del data
            if len(run) == PART_CHUNKS:
                parts.append(finish(merged(path, run)))
                run = []
    except document.Fallback:
        return CUT_WRONG
    return CUT_WRONG  # pragma: no cover - split_from ends with the Document


# --- a part handed over through a file ---------------------------------------------------------
# Pickled through the pipe, a part's polars tables were written and read only after the loader's own half
# was done, one part at a time; the worker writes each part's tables as Arrow IPC files as it makes
# them instead (while the loader still decodes), and the loader reads them back in a fraction of that.


def spill(part: Chunk, folder: Path, number: int) -> Chunk:
    """Write the part's tables to Arrow IPC files in `folder`; if that fails (e.g. the folder is full),
    the part keeps its tables and goes through the pipe."""
    written: dict[str, str] = {}
    try:
        for table, frame in part.tables.items():
            target = folder / f"{number}.{table}.arrow"
            written[table] = str(target)
            frame.write_ipc(target)
    except (OSError, pl.exceptions.PolarsError):
        for name in written.values():
            Path(name).unlink(missing_ok=True)
        return part
    part.tables, part.files = {}, written
    return part


def unspill(part: Chunk) -> Chunk:
    """A part's tables read back from the files `spill` wrote (each file removed once read)."""
    if part.files:
        tables = {}
        for table, name in part.files.items():
            tables[table] = pl.read_ipc(name)
            Path(name).unlink(missing_ok=True)
        part.tables, part.files = tables, {}
    return part
