"""Streams given as traces: a FIFO, a pipe (`<(zcat t.json.gz)`), a character device.

The loader reads a file more than once (its size, its first bytes for gzip, halves for the worker): a stream
is copied once into a private temporary file, and read from there; what it prints names the stream, not the
copy. The copy is bounded: a stream must start as a trace does (a JSON object, or gzip), and may hold no more
than the temporary folder's free space leaves (less a reserve; `HEADROOM_STREAM_MAX_BYTES` lowers it), so
`headroom classify /dev/zero` stops at once and an endless stream stops at the bound. An interrupted or failed
copy is removed before the error leaves; a finished one when the process exits (`atexit`, which the command
line runs also on Ctrl-C and SIGTERM).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from headroom.trace.kineto import TraceError

BLOCK = 4 << 20
RESERVE_BYTES = 1 << 30  # free space left on the temporary folder's disk
_STREAM_COPIES: dict[str, str] = {}  # the copy's path -> the stream's
_FOLDERS: list[str] = []


def is_stream(path: Path) -> bool:
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def limit_bytes(folder: str) -> int:
    """The most bytes a stream's copy may hold: the folder's free space less a reserve, or
    `HEADROOM_STREAM_MAX_BYTES` when lower."""
    free = shutil.disk_usage(folder).free - RESERVE_BYTES
    env = os.environ.get("HEADROOM_STREAM_MAX_BYTES", "").strip()
    if env:
        try:
            free = min(free, int(env))
        except ValueError:
            raise TraceError(f"HEADROOM_STREAM_MAX_BYTES={env!r}: expected a whole number of bytes") from None
    return max(free, 0)


def _starts_as_a_trace(head: bytes) -> bool:
    """A gzip member, or text whose first character (after blanks and a byte-order mark) opens an object."""
    if head.startswith(b"\x1f\x8b"):
        return True
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
    return not text or text.startswith(b"{")


def spooled(path: Path) -> Path:
    """`path`, or for a stream the temporary copy of what it holds (removed when the process exits)."""
    if not is_stream(path):
        return path
    import atexit
    import tempfile

    folder = tempfile.mkdtemp(prefix="headroom-stream-")
    _FOLDERS.append(folder)
    atexit.register(remove_copies)
    copy = Path(folder) / (Path(path).name or "stream")
    try:
        _copy(path, copy, limit_bytes(folder))
    except BaseException:
        shutil.rmtree(folder, True)  # a failed or interrupted copy leaves nothing behind
        raise
    _STREAM_COPIES[str(copy)] = str(path)
    return copy


def _copy(path: Path, copy: Path, limit: int) -> None:
    written = 0
    try:
        with open(path, "rb") as src, open(copy, "wb") as dst:
            while True:
                block = src.read(BLOCK)
                if not block:
                    return
                if written == 0 and not _starts_as_a_trace(block[:64]):
                    raise TraceError(
                        f"{path}: not a trace (a JSON object or gzip data expected; it starts {block[:8]!r})"
                    )
                written += len(block)
                if written > limit:
                    raise TraceError(
                        f"{path}: the stream holds more than {limit:,} bytes, the most its copy may "
                        f"take (the temporary folder's free space less 1 GiB, or "
                        f"HEADROOM_STREAM_MAX_BYTES)"
                    )
                dst.write(block)
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None


def remove_copies() -> None:
    """Remove every stream copy of this process (at exit, after Ctrl-C or SIGTERM)."""
    while _FOLDERS:
        shutil.rmtree(_FOLDERS.pop(), True)


def source_name(path: Path | str) -> str:
    """What a trace read from `path` is called: the stream's name for the copy of a stream."""
    return _STREAM_COPIES.get(str(path), str(path))


def named(message: str) -> str:
    """`message` with each stream copy's path replaced by the stream's."""
    for copy, original in _STREAM_COPIES.items():
        message = message.replace(copy, original)
    return message
