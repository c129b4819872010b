"""The trace document: its bytes (gunzipped on the fly), cut into chunks between two events of
``traceEvents`` for ``kineto`` to decode, and its metadata.

A chunk is only a candidate cut until it decodes; a document that cannot be streamed safely is
decoded whole (``Fallback``), which is exact. Split from ``kineto`` (the event structs and the
decoding of one chunk) because reading and cutting the file is its own concern.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from headroom.trace.kineto import BYTE_OFFSET, TraceError

# --- the document around the events ------------------------------------------------


class _TraceFile(msgspec.Struct):
    # Events stay raw (views into the input), decoded a chunk at a time.
    traceEvents: list[msgspec.Raw] | None = None
    baseTimeNanoseconds: int | None = None
    schemaVersion: msgspec.Raw = msgspec.Raw()
    deviceProperties: msgspec.Raw = msgspec.Raw()
    distributedInfo: msgspec.Raw = msgspec.Raw()
    traceName: msgspec.Raw = msgspec.Raw()
    # headroom's own run manifest, written by `headroom profile`.
    headroom: msgspec.Raw = msgspec.Raw()


META_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "traceName", "headroom")


_DOC = msgspec.json.Decoder(_TraceFile)


# --- reading bytes ----------------------------------------------------------------

BLOCK = 4 << 20  # bytes of (decompressed) text per chunk


def missing(path: Path) -> str:
    """Why `path` cannot be opened when it does not exist: no such file, or a link to nothing."""
    if Path(path).is_symlink():
        return f"{path}: a broken symbolic link (to {os.readlink(path)})"
    return f"{path}: no such file"


from headroom.trace.spool import is_stream, named, source_name, spooled  # noqa: E402,F401 - streams


def open_binary(path: Path):
    """The file opened for reading bytes; a missing file or a directory is a TraceError naming it."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise TraceError(missing(path)) from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None


def is_gzip(path: Path) -> bool:
    """Whether the file is gzip (by its magic bytes)."""
    with open_binary(path) as f:
        return f.read(2) == b"\x1f\x8b"


def blocks(path: Path, size: int | None = None, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
    """The file's text in blocks of about `size` bytes, gunzipped on the fly (gzip detected by magic bytes).
    `start`/`stop`: only the bytes [start, stop) of a plain (not gzip) file."""
    size = size or BLOCK
    with open_binary(path) as f:
        try:
            if start or stop is not None:
                f.seek(start)
                left = (stop - start) if stop is not None else None
                while left is None or left > 0:
                    data = f.read(size if left is None else min(size, left))
                    if not data:
                        return
                    if left is not None:
                        left -= len(data)
                    yield data
                return
            first = f.read(max(size, 2))  # gzip's magic is two bytes, whatever the block size
            if not first:
                raise TraceError(f"{path}: empty file")
            if first[:2] != b"\x1f\x8b":
                while first:
                    yield first
                    first = f.read(size)
                return
            yield from read_ahead(gunzipped(path, f, first, size))
        except zlib.error as e:
            raise TraceError(f"{path}: truncated or corrupt gzip ({e})") from None
        except OSError as e:
            raise TraceError(f"{path}: cannot read ({e.strerror})") from None


def gunzipped(path: Path, f, first: bytes, size: int) -> Iterator[bytes]:
    inflate = zlib.decompressobj(wbits=31)
    data, produced = first, False
    while True:
        while data:
            out = inflate.decompress(data, size)
            if out:
                produced = True
                yield out
            data = inflate.unconsumed_tail
            if inflate.eof:  # a second gzip member follows (concatenated .gz)
                data = inflate.unused_data + data
                if not data.strip(b"\x00"):
                    break
                inflate = zlib.decompressobj(wbits=31)
        data = f.read(size)
        if not data:
            break
    if not inflate.eof:
        raise TraceError(
            f"{path}: truncated or corrupt gzip (compressed file ended before the end-of-stream marker was reached)"
        )
    if not produced:
        raise TraceError(f"{path}: empty file (after gunzip)")


READ_AHEAD = 2  # blocks inflated ahead of the one being decoded


def read_ahead(items: Iterator[bytes], depth: int = READ_AHEAD) -> Iterator[bytes]:
    """`items` as they come, produced up to `depth` ahead by a thread: zlib inflates without holding the
    GIL, so a gzip file's next blocks are inflated while the scanner decodes this one (the 2 GB training
    trace gzipped: docs/benchmarks.md). An error of the producer is raised here, where its item would be;
    when the consumer stops early, the thread stops after the block it is inflating."""
    ahead: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ahead.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_END)
        except BaseException as e:  # handed to the consumer, raised there
            put(_Raised(e))
        finally:
            items.close()  # type: ignore[attr-defined]

    thread = threading.Thread(target=produce, name="headroom-gunzip", daemon=True)
    thread.start()
    try:
        while True:
            item = ahead.get()
            if item is _END:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()


_END = object()


@dataclass
class _Raised:
    error: BaseException


def read_bytes(path: Path) -> bytes:
    return b"".join(blocks(path))


# --- splitting the document ---------------------------------------------------------

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEPARATOR = re.compile(rb"\}\s*,\s*\{")


@dataclass
class Document:
    """What the splitter found: event chunks (text between two events), then the rest of the document."""

    meta: dict[str, Any]
    base_ns: int | None


def _last_separator(buf: bytes, lo: int) -> re.Match | None:
    """The last `}, {` between two values in buf[lo:] (a candidate cut; decoding the chunk proves it)."""
    end = len(buf)
    for _ in range(64):
        p = buf.rfind(b"}", lo, end)
        if p < 0:
            return None
        m = _SEPARATOR.match(buf, p)
        if m:
            return m
        end = p
    matches = list(_SEPARATOR.finditer(buf, lo))
    return matches[-1] if matches else None


def split(
    path: Path, block: int | None = None, stop: int | None = None
) -> Iterator[tuple[memoryview | bytes, int] | Document]:
    """Yield (a JSON array of consecutive events, the file offset of its first byte) chunk by chunk,
    then the `Document` (metadata).

    A chunk is cut at a `}, {` and only proven right when it decodes (decode_events): it starts
    between two events, so it decodes as an array only if it also ends between two. The array is
    written in place into the read buffer (its brackets overwrite the separator's whitespace or
    comma) and handed on as a view, so no chunk is copied. Raises `Fallback` when the document is
    not laid out so that it can be streamed safely (the caller then decodes it whole, which is exact).
    `stop`: end with the event whose closing `}` is at this file offset (a `Halves.close`), no Document.
    """
    it = blocks(path, block, stop=None if stop is None else stop + 1)
    found = _events_start(it)
    if found is None:
        raise Fallback()
    buf, prefix, offset = found
    yield from _cut(path, it, buf, offset, prefix, stop is not None)


def split_from(
    path: Path, start: int, prefix: bytes, block: int | None = None
) -> Iterator[tuple[memoryview | bytes, int] | Document]:
    """The same as `split` for the events from file offset `start` (the `{` after a `Halves.close`) to the
    end of traceEvents, then the Document; `prefix`: the document's text before the events' array."""
    buf = bytearray(b"[")  # stands in for the separator byte before `start`, as `split` writes it
    yield from _cut(path, blocks(path, block, start=start), buf, start - 1, prefix, False)


def _events_start(it: Iterator[bytes]) -> tuple[bytearray, bytes, int] | None:
    """Read until traceEvents' "[": (the buffer from it, the document's text before it, its file offset)."""
    buf = bytearray()
    m = None
    for data in it:
        buf += data
        m = _EVENTS_KEY.search(buf)
        if m:
            break
    if m is None:
        return None
    prefix = bytes(buf[: m.end() - 1])
    try:
        # The key must be a key of the top-level object, not one nested deeper or inside a string.
        if not isinstance(msgspec.json.decode(prefix + b"[]}"), dict):
            raise Fallback()
    except (msgspec.DecodeError, RecursionError):
        raise Fallback() from None
    del buf[: m.end() - 1]  # buf[0] is the array's "["
    return buf, prefix, m.end() - 1


def _cut(
    path: Path, it: Iterator[bytes], buf: bytearray, offset: int, prefix: bytes, first_part: bool
) -> Iterator[tuple[memoryview | bytes, int] | Document]:
    """Cut `buf` (from an array's "[" at file offset `offset`) and the blocks that follow into chunks;
    `first_part`: the blocks end right after an event's "}" (the first of two halves): close the array there."""
    for data in it:
        scanned = len(buf)
        buf += data
        del data
        cut = _last_separator(buf, max(1, scanned - 1))  # type: ignore[arg-type]
        if cut is None:
            continue
        close, open_ = cut.start(), cut.end() - 1  # the "}" ending one event, the "{" starting the next
        buf[close + 1] = 0x5D  # "]"
        view = memoryview(buf)
        chunk = view[: close + 2]
        yield chunk, offset
        chunk.release()
        view.release()
        offset += open_ - 1
        try:
            del buf[: open_ - 1]
        except BufferError:  # a view of the chunk is still held (its scan runs in a thread): leave it its bytes
            buf = bytearray(buf[open_ - 1 :])
        # "[" where the separator's last byte was, written only now: with "},{" that byte is the chunk's own
        # closing "]", which a chunk still being scanned must keep
        buf[0] = 0x5B
    if first_part:
        if len(buf) > 1:
            buf += b"]"
            yield buf, offset  # type: ignore[misc]
        return
    tail = prefix + buf
    del buf
    try:
        doc = _DOC.decode(tail)
    except msgspec.ValidationError as e:
        raise TraceError(f"{path}: not a Kineto trace ({e})") from None
    except (msgspec.DecodeError, RecursionError):
        raise Fallback() from None
    if _EVENTS_KEY.search(tail, len(prefix) + 1) is not None:
        raise Fallback()  # "traceEvents" again: decode exactly, as a whole
    raws = doc.traceEvents or []
    if raws:
        yield _array(raws), -1
    yield Document(_meta(doc), doc.baseTimeNanoseconds)


@dataclass(frozen=True)
class Halves:
    """A plain trace file divided between two processes: the first part's events end with the `}` at file
    offset `close`, the second's begin with the `{` at `open`; `prefix`: the text before traceEvents' array.
    Like every cut, proven only when both parts decode."""

    close: int
    open: int
    prefix: bytes


def halves(path: Path, fraction: float) -> Halves | None:
    """Where to divide a plain (not gzip) trace file at about `fraction` of its bytes; None when it cannot
    be divided (gzip, no traceEvents near the start, no separator near that point)."""
    size = path.stat().st_size
    if is_gzip(path):
        return None
    try:
        found = _events_start(blocks(path, 1 << 20, start=0, stop=min(size, 1 << 20)))
    except Fallback:
        return None
    if found is None:
        return None
    prefix, events_at = found[1], found[2]
    at = max(int(size * fraction), events_at + 1)
    with open_binary(path) as f:
        f.seek(at)
        window = f.read(1 << 20)
    m = _SEPARATOR.search(window)
    if m is None:
        return None
    return Halves(close=at + m.start(), open=at + m.end() - 1, prefix=prefix)


def _array(raws: list[msgspec.Raw]) -> bytes:
    return b"[" + b",".join(raws) + b"]"


class Fallback(Exception):
    """The streamed split cannot be trusted for this file; decode it whole."""


def _meta(doc: _TraceFile) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key in META_KEYS:
        value = getattr(doc, key)
        if len(value):
            meta[key] = msgspec.json.decode(value)
    return meta


def whole(path: Path, events_per_chunk: int = 1 << 16) -> Iterator[tuple[bytes, int] | Document]:
    """The same as `split`, from the document decoded whole (exact for any layout; the error messages' source)."""
    raw = read_bytes(path)
    try:
        doc = _DOC.decode(raw)
    except msgspec.ValidationError as e:
        # Valid JSON of the wrong shape (e.g. a list, or traceEvents not a list).
        raise TraceError(f"{path}: not a Kineto trace ({e})") from None
    except msgspec.DecodeError as e:
        raise TraceError(f"{path}: invalid JSON ({_json_words(str(e), raw)})") from None
    except RecursionError:
        raise TraceError(f"{path}: invalid JSON (objects nested too deeply)") from None
    if doc.traceEvents is None:
        raise TraceError(f"{path}: not a Kineto trace (no 'traceEvents' list)")
    raws = doc.traceEvents
    del raw
    for start in range(0, len(raws), events_per_chunk):
        yield _array(raws[start : start + events_per_chunk]), -1
    yield Document(_meta(doc), doc.baseTimeNanoseconds)


def _json_words(message: str, raw: bytes) -> str:
    m = BYTE_OFFSET.search(message)
    if m:
        at = int(m.group(1))
        try:
            raw[max(0, at - 3) : at + 4].decode("utf-8")
        except UnicodeDecodeError:
            return f"invalid UTF-8 near byte {at}"
    return message
