"""Load Kineto (torch.profiler) JSON traces into compact columnar tables.

The file is streamed (docs/trace-core.md, "Load"): read in blocks, cut between
events, each chunk decoded by msgspec into typed structs and kept as polars
columns of the events and fields headroom uses; on big files a worker process
decodes every other chunk. Nothing builds a Python object per event that
outlives its chunk, so memory follows the tables, not the file.

Then the tables are checked (`validate`: impossible GPU times are refused, or
dropped with --lenient) and handed on as pandas DataFrames with numeric
columns: one row per GPU activity, per CPU range and per runtime/driver call.
A cache keyed by the file's content (size, times, inode and sampled blocks:
`cache`) makes the second load of the same file a read of those columns.

Timestamps stay in the trace's microseconds. Traces that carry
``baseTimeNanoseconds`` store ``ts`` relative to it; older traces store epoch
microseconds (as integers, exact in float64). ``Trace.base_ns`` records the
base so absolute times can be recovered.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lazy_loader
import numpy as np

from headroom.trace import cache, chunks, document, kineto, parallel, validate
from headroom.trace.document import Document
from headroom.trace.kineto import Chunk, TraceError
from headroom.trace.tables import TRACE_TABLES, Trace, tabulate
from headroom.trace.worker import Worker

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_loader.load("polars")  # imported on first use (a cached analysis needs none)

__all__ = ["Trace", "TraceError", "find_trace_files", "load_trace", "load_traces", "read_trace_json"]


def load_trace(path: str | os.PathLike, lenient: bool = False, use_cache: bool = True) -> Trace:
    """Read one Kineto trace (``.json`` or ``.json.gz``) into a :class:`Trace`.

    lenient: drop GPU activities and steps with impossible times (counted in `Trace.warnings`)
             instead of refusing the trace.
    use_cache: read/write the columnar cache (docs/trace-core.md, "Cache").
    """
    path = document.spooled(Path(path))
    key = cache.key(path, lenient) if use_cache else None
    hit = _from_cache(path, key, lenient)
    if hit is not None:
        return hit
    return _finish(path, key, _decoded(path, lenient))


def _from_cache(path: Path, key, lenient: bool) -> Trace | None:
    if key is None:
        return None
    header = cache.fetch_header(key)
    if header is None:
        return None
    return DeferredTrace.of(path, key, header, lenient)


class DeferredTrace(Trace):
    """A Trace from the cache whose tables are read when first used, each on its own (a cached analysis
    needs none; `targets` reads the CPU side, not the GPU activities it attributed). All come from one
    open entry (cache.StoredTables); if the entry is gone or unreadable by the first, the file is
    loaded again, and then every table comes from that load."""

    @classmethod
    def of(cls, path: Path, key, header: dict, lenient: bool) -> DeferredTrace:
        t = object.__new__(cls)
        t.__dict__.update(
            source=str(path),
            base_ns=header["base_ns"],
            metadata=header["metadata"],
            warnings=header["warnings"],
            cache_key=key,
            _path=path,
            _lenient=lenient,
            _stored=None,
        )
        return t

    def __getattr__(self, name: str):
        # Called only for attributes not set yet: the tables, on first use.
        if name not in TRACE_TABLES or "_path" not in self.__dict__:
            raise AttributeError(name)
        stored = self.__dict__["_stored"]
        if stored is None:
            try:
                stored = cache.StoredTables(self.cache_key)
                if set(stored.columns) != set(TRACE_TABLES):
                    stored.close()
                    raise ValueError("other tables")
            except (OSError, ValueError, KeyError, TypeError):
                return self._load_again(name)
            self.__dict__["_stored"] = stored
        try:
            table = stored.read(name)
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            stored.close()
            if not any(t in self.__dict__ for t in TRACE_TABLES):
                return self._load_again(name)
            cache.discard(self.cache_key.entry)  # so that the next command writes it again
            # The open entry failed after it answered (a damaged file): tables already handed out
            # came from it, so this is an error, not a silent mix of two loads.
            raise TraceError(
                f"{self.source}: the cache entry {self.cache_key.entry} could not be read (it is removed: run again)"
            ) from None
        self.__dict__[name] = table
        if all(t in self.__dict__ for t in TRACE_TABLES):
            stored.close()
        return table

    def __getstate__(self) -> dict:
        # A copy (pickle, deepcopy) holds every table: its own later reads could otherwise come from
        # another entry or load than the tables read before it was made (and an open file cannot be pickled).
        for t in TRACE_TABLES:
            getattr(self, t)
        return {k: v for k, v in self.__dict__.items() if k != "_stored"} | {"_stored": None}

    def _load_again(self, name: str):
        # The entry could not be read: removed, and written again from this load (else every later
        # command would find it, fail, and load the trace again).
        cache.discard(self.cache_key.entry)
        fresh = _finish(self._path, self.cache_key, _decoded(self._path, self._lenient))
        self.__dict__.update({t: getattr(fresh, t) for t in TRACE_TABLES})
        return self.__dict__[name]


def _decoded(path: Path, lenient: bool, workers: bool = True) -> Decoded:
    # Chunks of structs: the cyclic GC would rescan them for nothing.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return decode(path, lenient, workers)
    finally:
        if gc_was_enabled:
            gc.enable()


@dataclass
class Decoded:
    """One trace file decoded (what the worker sends back for a whole file): its checked polars tables in event
    order, each table's rows in loader order (None: as they are), time base, metadata and warnings."""

    tables: dict[str, pl.DataFrame]
    orders: dict[str, np.ndarray | None]
    base_ns: int | None
    metadata: dict[str, Any]
    warnings: list[str]


def _finish(path: Path, key, decoded: Decoded) -> Trace:
    base_ns, meta, warnings = decoded.base_ns, decoded.metadata, decoded.warnings
    with parallel.small_pages():
        trace = tabulate(document.source_name(path), decoded.tables, base_ns, meta, warnings, decoded.orders)
    parallel.trim_heap()  # (the polars tables and the arrays made from them are freed)
    if key is not None and cache.store_tables(
        key, {t: getattr(trace, t) for t in TRACE_TABLES}, base_ns, meta, warnings
    ):
        trace.cache_key = key
    return trace


def iter_traces(files: list[Path], lenient: bool = False, use_cache: bool = True) -> Generator[Trace, None, None]:
    """Each file's Trace, in order. When the worker helps (parallel.worker_for_next), it decodes every other
    file (the 2nd, 4th, ...) while this process decodes and the caller analyses the one before it; otherwise
    one at a time (a big file in two halves, `decode`)."""
    files = [Path(f) for f in files]
    helper: Worker | None = None
    try:
        queued: tuple[Path, Any] | None = None  # (file, cache key) the worker is decoding
        for i, path in enumerate(files):
            key = cache.key(path, lenient) if use_cache else None
            if queued is not None and queued[0] == path:
                result = chunks.from_worker(helper)
                queued = None
                decoded = result
            else:
                decoded = None
            nxt = files[i + 1] if i + 1 < len(files) else None
            # Not after a file of the worker's, so it decodes every other one: handed the next file each time,
            # the worker (decoding, then pickling it back) was the slower side and the directory took longer
            # than one file at a time (benchmarks/rank_directory.py).
            if (
                decoded is None
                and nxt is not None
                and queued is None
                and _worth_a_worker(path, nxt, use_cache, lenient)
            ):
                if helper is None:
                    helper = Worker()
                helper.submit_file(nxt, lenient)
                queued = (nxt, None)
            if decoded is None:
                hit = _from_cache(path, key, lenient)
                if hit is not None:
                    yield hit
                    continue
                decoded = _decoded(path, lenient, workers=helper is None or not helper.busy)
            yield _finish(path, key, decoded)
    finally:
        if helper is not None:
            if helper.busy:
                try:
                    helper.result()
                except (EOFError, OSError):
                    pass
            helper.close()


def _worth_a_worker(path: Path, nxt: Path, use_cache: bool, lenient: bool) -> bool:
    if use_cache and (k := cache.key(nxt, lenient)) is not None and (k.entry / "header.json").exists():
        return False  # the next one is a cache read
    return parallel.worker_for_next(path, nxt)


def decode(path: Path, lenient: bool = False, workers: bool = True) -> Decoded:
    """One trace file decoded: its checked polars tables, their loader orders, time base, metadata, warnings
    (`workers`: may use the worker process: for a plain file it decodes the second half while this
    process decodes the first; for a gzip file, every other chunk)."""
    parallel.check_memory_for(path)
    parallel.polars_gives_memory_back()
    size = parallel.file_size(path)
    helper = Worker() if workers and parallel.worker_for_file(size) else None
    # (a gzip file's blocks are inflated in a thread already: document.read_ahead)
    ahead = helper is None and not document.is_gzip(path) and parallel.scan_ahead(workers)
    try:
        found = _decoded_in_halves(path, helper) if helper is not None else None
        if found is None and helper is not None and helper.closed:
            helper = None  # stopped mid-answer (the first half's cut proved wrong): go on without it
        if found is None:
            try:
                found = chunks.decode_chunks(path, document.split(path), helper, parallel.check_memory_left, ahead)
            except document.Fallback:
                if helper is not None and helper.busy:
                    helper.result()
                found = chunks.decode_chunks(path, document.whole(path), helper, parallel.check_memory_left, ahead)
    finally:
        if helper is not None:
            helper.close()
    with parallel.small_pages():
        return _assemble(path, *found, lenient)  # type: ignore[call-arg]


def _decoded_in_halves(path: Path, helper: Worker):
    """(chunks, Document) of a plain file decoded in two halves side by side, or None to decode it as one
    run (gzip; no place to divide it; a cut that proved wrong on either side)."""
    size = parallel.file_size(path)
    where = document.halves(path, parallel.first_share(size))
    if where is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="headroom-half-", dir=parallel.spill_base(size)))
    try:
        helper.submit_half(path, where.open, where.prefix, folder)
        try:
            mine, _ = chunks.decode_chunks(
                path, document.split(path, stop=where.close), None, parallel.check_memory_left
            )
        except document.Fallback:
            helper.close()  # its half may be several messages long: stop it rather than read them
            return None
        first = chunks.from_worker(helper, last=False)
        if first == chunks.CUT_WRONG:
            helper.answered()  # that was its whole answer
            return None
        for _ in range(first):  # the number of parts, then each part, then the Document
            mine.append(chunks.unspill(chunks.from_worker(helper, last=False)))
        return mine, chunks.from_worker(helper)
    finally:
        if helper.busy:
            helper.close()  # stopped before its folder goes: it may still be writing a part
        shutil.rmtree(folder, ignore_errors=True)


def _assemble(path: Path, decoded: list[Chunk], doc: Document, lenient: bool) -> Decoded:
    """The chunks merged, ordered and checked."""
    warnings: list[str] = []
    whole = chunks.merged(path, decoded, freed=parallel.trim_heap)
    tables = {table: _in_event_order(whole.tables.pop(table)) for table in kineto.TABLES}
    tables["flows"] = _flows_read(tables)
    unreadable = sum(whole.unreadable.values())
    first_unreadable, gpu_unreadable = whole.first_unreadable, whole.gpu_unreadable
    if unreadable:
        i, problem = first_unreadable  # type: ignore[misc]
        warnings.append(
            f"{unreadable} event{'s' if unreadable != 1 else ''} could not be read and "
            f"{'were' if unreadable != 1 else 'was'} skipped (first: event {i}: {problem})"
        )
    orders = {table: loader_order(tables[table]) for table in ("gpu", "cpu")}
    try:
        checked, dropped = validate.check(tables, str(path), lenient, gpu_unreadable, orders, doc.meta)
    except validate.ImpossibleEvent as e:
        raise TraceError(str(e)) from None
    warnings += dropped
    for table in kineto.TABLES:
        if table != "flows" and (table not in orders or checked[table] is not tables[table]):
            orders[table] = loader_order(checked[table])  # (a table --lenient dropped rows of: anew)
    return Decoded(checked, orders, doc.base_ns, doc.meta, warnings)


def _flows_read(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """The flow events the tables are made with (tables.tabulate): the forward -> backward pairs, and the
    launch -> kernel flows only when a GPU activity or a launch lacks its correlation (they fill it in).
    The 4 GB training trace's 3.8 M flow events are 0.2 GB held through the checks and tabulation."""
    flows = tables["flows"]
    if tables["gpu"]["correlation"].null_count() or tables["launches"]["correlation"].null_count():
        return flows
    return flows.filter(pl.col("kind") == "fwdbwd")


# Rows keep the order headroom's loader has always given them (so every table and every float
# sum over them stays as it was): per block of 65,536 events, grouped by kind in the order the
# kinds first appear in the block, then in event order. The tables stay in event order until they
# become pandas tables (tables.tabulate), where the order is a take of numpy arrays: a gather of
# the polars frames' text columns included was the larger part of this stage on the 2 GB trace (cProfile).
ORDER_BLOCK = 1 << 16


def _in_event_order(frame: pl.DataFrame) -> pl.DataFrame:
    """Chunks keep their events in order and are merged in order; if not, the rows are put so."""
    if frame.height < 2 or "index" not in frame.columns:
        return frame
    index = frame["index"].to_numpy()
    return frame if bool((index[1:] > index[:-1]).all()) else frame.sort("index")


def loader_order(frame: pl.DataFrame) -> np.ndarray | None:
    """The frame's rows (in event order) in loader order: row numbers, or None when that is their order."""
    if "kind" not in frame.columns or frame.height == 0 or frame["kind"].n_unique() == 1:
        return None
    index = frame["index"].to_numpy()
    # Rows are in event order, so a (block, kind) group's first row is its first event: ranking the groups
    # by their first row and sorting stably by that rank groups the kinds of each block in order of
    # appearance, rows in event order. The groups are few (blocks x kinds): a table of their first rows,
    # not a sort of the rows, and a stable sort of small integers (radix) for the order.
    kinds = frame["kind"].cast(pl.Categorical).to_physical().to_numpy().astype(np.int64)
    block = index // ORDER_BLOCK
    group = (block - block[0]) * (int(kinds.max()) + 1) + kinds
    rows = np.arange(len(group), dtype=np.int64)
    first = np.full(int(group.max()) + 1, len(group), dtype=np.int64)
    np.minimum.at(first, group, rows)
    present = np.flatnonzero(first < len(group))
    rank = np.zeros(len(first), dtype=np.int64)
    rank[present[np.argsort(first[present], kind="stable")]] = np.arange(len(present))
    key = rank[group]
    order = np.argsort(key.astype(np.int16) if len(present) < (1 << 15) else key, kind="stable")
    if bool((order[1:] == order[:-1] + 1).all()):
        return None
    return order


def is_trace_name(path: Path) -> bool:
    """Whether a directory's file of this name is read as a trace (`find_trace_files`)."""
    name = Path(path).name
    return (name.endswith(".json") or name.endswith(".json.gz")) and not name.startswith("manifest")


def find_trace_files(path: str | os.PathLike) -> list[Path]:
    """A trace file, or every ``*.json``/``*.json.gz`` trace in a directory (one per rank)."""
    path = Path(path)
    if path.is_dir():
        # A link to nothing among the traces is kept, to be named when its turn comes (skipped without a
        # word, a rank of a run would go missing).
        files = sorted(
            p for p in path.iterdir() if (p.is_file() or (p.is_symlink() and not p.exists())) and is_trace_name(p)
        )
        if not files:
            raise TraceError(f"{path}: directory holds no .json or .json.gz trace")
        return files
    if not path.exists():
        raise TraceError(document.missing(path))
    return [document.spooled(path)]


def load_traces(path: str | os.PathLike, **kwargs) -> list[Trace]:
    return list(iter_traces(find_trace_files(path), **kwargs))


def read_trace_json(path: str | os.PathLike) -> dict:
    """The whole trace as plain JSON (for rewriting it, e.g. `annotate`)."""
    raw = document.read_bytes(Path(path))
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise TraceError(f"{path}: invalid JSON ({e})") from None
