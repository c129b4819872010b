"""A cache of the loader's columns, so the second command on a trace is interactive.

An entry is keyed by the trace's absolute path and by its content as cheaply as
that can be told: size, modification time, inode and change time (which no one
can set back: a file rewritten in place with its old size and mtime restored
still gets a new ctime), and a hash of sampled blocks (the first, middle and last
64 KiB); with the --lenient flag and a hash of the code that builds its tables, so
an edited trace or a new headroom never reads a stale entry. An entry that cannot
be read (a damaged file) is removed when found, so the next load writes it again. It holds the Trace's pandas tables
as numpy arrays in one .npz file (text as codes into its distinct values, categories
with their order) and a JSON header, in the user's cache directory
($HEADROOM_CACHE_DIR, else $XDG_CACHE_HOME/headroom, else ~/.cache/headroom).
numpy, not Arrow IPC: reading numpy's files imports nothing more, while importing polars' reader
costs a command on a cached trace 0.2 s (docs/benchmarks.md).

Safe under concurrent use: an entry is written into a temporary directory and
renamed into place (readers see a whole entry or none); a writer takes a file
lock per trace, and one that finds it held skips writing instead of waiting.
Every failure to read or write the cache (full disk, read-only home) falls back
to loading the trace: the cache can only save time, never change a result.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headroom.trace.cache_key import (  # noqa: F401 - the cache's names, kept here
    MIN_BYTES_DEFAULT,
    SAMPLE_BYTES,
    Key,
    cache_dir,
    code_version,
    key,
    min_bytes,
    sampled_hash,
)
from headroom.trace.codes import factorized


def discard(where: Path) -> None:
    """Remove an entry (or one of its frame sets) that could not be read: left in place, it would be
    found again by every load and never rewritten (a writer keeps an entry whose header exists)."""
    shutil.rmtree(where, ignore_errors=True)


# --- the loader's tables --------------------------------------------------------------


def store_tables(
    k: Key, tables: dict[str, pd.DataFrame], base_ns: int | None, meta: dict[str, Any], warnings: list[str]
) -> bool:
    """The Trace's tables (numpy arrays in one .npz, as `store_frames` writes them) and a JSON header
    (base_ns, metadata, warnings, each table's columns)."""
    converted = _converted(tables)
    if converted is None:
        return False  # e.g. ids beyond 64 bits (object columns of Python ints): loaded each time
    text = _json(
        {"tables": {t: c[1] for t, c in converted.items()}, "base_ns": base_ns, "metadata": meta, "warnings": warnings}
    )
    return text is not None and _publish(k, k.entry, _writer("tables.npz", converted, text), replace_siblings=True)


class StoredTables:
    """An entry's tables, each read when first asked for, all from one open file: the tables of one
    trace read at different times still come from one entry, even if another process replaces it
    meanwhile (the open file stays readable). Raises OSError/ValueError when the entry is gone or
    holds other tables than its header lists."""

    def __init__(self, k: Key) -> None:
        self.columns: dict[str, dict] = json.loads((k.entry / "header.json").read_text())["tables"]
        self._file = np.load(k.entry / "tables.npz", allow_pickle=False)
        expected = {f"{t}.{i}" for t, h in self.columns.items() for i in range(len(h["columns"]))}
        if set(self._file.files) != expected:
            self._file.close()
            raise ValueError(f"{k.entry}: the tables do not match their header")

    def read(self, table: str) -> pd.DataFrame:
        try:
            return _read_frame(self._file, table, self.columns[table])
        except zipfile.BadZipFile as e:
            raise ValueError(str(e)) from e

    def close(self) -> None:
        self._file.close()


# --- other frames of the same trace (e.g. the attributed GPU activities) ---------------------


def fetch_frame(k: Key | None, name: str) -> pd.DataFrame | None:
    hit = fetch_frames(k, name)
    return None if hit is None or set(hit[0]) != {"frame"} else hit[0]["frame"]


def store_frame(k: Key | None, name: str, df: pd.DataFrame) -> bool:
    return store_frames(k, name, {"frame": df}, {})


# --- a set of frames and a header (e.g. an analysis of the trace) --------------------------


def fetch_frames(k: Key | None, name: str) -> tuple[dict[str, pd.DataFrame], dict[str, Any]] | None:
    """The frames and header `store_frames` wrote under `name`, or None."""
    if k is None:
        return None
    where = k.entry / f"{name}.frames"
    try:
        header = json.loads((where / "header.json").read_text())
        with np.load(where / "frames.npz", allow_pickle=False) as arrays:
            frames = {f: _read_frame(arrays, f, h) for f, h in header["frames"].items()}
        return frames, header["header"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, IndexError, TypeError, zipfile.BadZipFile):
        discard(where)  # damaged: written again by the caller
        return None


def store_frames(k: Key | None, name: str, frames: dict[str, pd.DataFrame], header: dict[str, Any]) -> bool:
    """Store frames and a JSON header beside the trace's tables (only frames whose columns the cache holds:
    numbers, booleans, text, categories of text; else nothing is stored)."""
    if k is None or not (k.entry / "header.json").exists():
        return False
    if not all(_plain_index(df) for df in frames.values()):
        return False  # the cache keeps no index: only frames indexed 0..n-1 read back the same
    converted = _converted(frames)
    if converted is None:
        return False
    text = _json({"frames": {f: c[1] for f, c in converted.items()}, "header": header})
    if text is None:
        return False  # a header value JSON cannot hold: not stored, computed each time
    return _publish(k, k.entry / f"{name}.frames", _writer("frames.npz", converted, text), replace_siblings=False)


def _converted(frames: dict[str, pd.DataFrame]) -> dict[str, tuple[list[np.ndarray], dict]] | None:
    """Each frame's arrays and column header (`_arrays`), or None when one has a column the cache cannot hold."""
    converted = {f: _arrays(df) for f, df in frames.items()}
    kept = {f: c for f, c in converted.items() if c is not None}
    return kept if len(kept) == len(converted) else None


def _json(value: dict[str, Any]) -> str | None:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return None


def _writer(file: str, converted: dict[str, tuple[list[np.ndarray], dict]], header: str):
    """What writes an entry's arrays (`FRAME.COLUMN_NUMBER` in one .npz) and its JSON header into a folder."""
    arrays = {f"{f}.{i}": a for f, (columns, _) in converted.items() for i, a in enumerate(columns)}

    def write(tmp: Path) -> None:
        np.savez(tmp / file, **arrays)  # type: ignore[arg-type]
        (tmp / "header.json").write_text(header)

    return write


def _read_frame(arrays, name: str, columns: dict) -> pd.DataFrame:
    """Frame `name` from an open .npz `_writer` wrote, with its column header."""
    return _from_arrays([arrays[f"{name}.{i}"] for i in range(len(columns["columns"]))], columns)


def _plain_index(df: pd.DataFrame) -> bool:
    return isinstance(df.index, pd.RangeIndex) and df.index.start == 0 and df.index.step == 1 and df.index.name is None


def fetch_header(k: Key) -> dict[str, Any] | None:
    """The header of the trace's tables (base_ns, metadata, warnings), without reading the tables."""
    try:
        header = json.loads((k.entry / "header.json").read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        discard(k.entry)  # damaged: the load that follows writes it again
        return None
    if isinstance(header, dict) and all(t in header for t in ("tables", "base_ns", "metadata", "warnings")):
        return header
    discard(k.entry)
    return None


def _arrays(df: pd.DataFrame) -> tuple[list[np.ndarray], dict] | None:
    """One numpy array per column: numbers as they are, strings as codes into their distinct values,
    categories as codes with their order; None for a column the cache cannot hold."""
    columns: list[np.ndarray] = []
    kinds: dict[str, dict[str, Any]] = {}
    for c in df.columns:
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            cats = s.cat.categories
            if not all(isinstance(v, str) for v in cats):
                return None
            columns.append(s.cat.codes.to_numpy().astype(np.int32))
            kinds[c] = {"kind": "category", "categories": list(cats)}
        elif s.dtype == object or isinstance(s.dtype, pd.StringDtype):
            # Text repeats (kernel and op names): stored as codes into its distinct values, which
            # reads back with one take instead of rebuilding a string per row.
            try:
                codes, distinct = factorized(np.asarray(s, dtype=object))
            except TypeError:  # unhashable values (lists): not text
                return None
            uniques = list(distinct)
            if not all(type(v) is str for v in uniques) or (codes < 0).any():
                return None  # e.g. ids beyond 64 bits, missing text: not cached, recomputed
            columns.append(codes.astype(np.int32))
            kinds[c] = {"kind": "text", "values": uniques, "dtype": None if s.dtype == object else str(s.dtype)}
        elif s.dtype.kind in "biuf":
            columns.append(s.to_numpy())
            kinds[c] = {"kind": "number", "dtype": str(s.dtype)}
        else:
            return None
    if len(set(df.columns)) != len(df.columns) or not all(isinstance(c, str) for c in df.columns):
        return None
    return columns, {"columns": list(df.columns), "kinds": kinds}


def _from_arrays(arrays: list[np.ndarray], header: dict) -> pd.DataFrame:
    # Columns handed over as they are (copy=False): the arrays were just read and belong to no one else,
    # and consolidating them into 2-D blocks would copy every number (half of the time of a cached read).
    out = {}
    for c, a in zip(header["columns"], arrays):
        kind = header["kinds"][c]
        if kind["kind"] == "category":
            out[c] = pd.Categorical.from_codes(a, categories=kind["categories"])
        elif kind["kind"] == "text":
            text = np.asarray(kind["values"], dtype=object)[a]
            out[c] = pd.Series(text, dtype=object if kind["dtype"] is None else kind["dtype"], copy=False)
        else:
            out[c] = a.astype(kind["dtype"], copy=False)
    return pd.DataFrame(out, columns=header["columns"], copy=False)


# --- writing safely ------------------------------------------------------------------


def _publish(k: Key, target: Path, write, replace_siblings: bool) -> bool:
    """Write an entry into a temporary directory, then rename it into place, holding the trace's lock."""
    from filelock import FileLock, Timeout  # here: only a writer locks, and a cached read saves the import

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(k.lock), timeout=0)
        with lock:
            if (target / "header.json").exists():
                return True
            if replace_siblings:  # older entries of this trace (it changed, or headroom did)
                for old in target.parent.iterdir():
                    if old != target and old.is_dir():
                        shutil.rmtree(old, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
            try:
                write(tmp)
                if target.exists():  # left by a writer that was killed before its header
                    shutil.rmtree(target, ignore_errors=True)
                os.replace(tmp, target)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        return True
    except Timeout:
        return False  # another process is writing this trace's entry
    except OSError:
        return False
