"""Where the cache lives and how a trace's entry is named (docs/trace-core.md, "Cache"): the file's size,
times, inode and a hash of sampled blocks, with the code that builds its tables. Imports neither numpy
nor pandas: a command replayed from its recorded output (headroom/cli/replay.py) names files with it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

# Traces smaller than this load faster than a cache entry is written.
MIN_BYTES_DEFAULT = 16 << 20
_TRACE_CODE = (
    "document.py",
    "kineto.py",
    "inputs.py",
    "chunks.py",
    "tables.py",
    "validate.py",
    "cache.py",
    "load.py",
    "ranges.py",
    "codes.py",
    "scan.py",
    "_scan.c",
    "schema.py",
    "parallel.py",
)


def cache_dir() -> Path | None:
    """Where entries live; None when caching is off (HEADROOM_CACHE_DIR=off)."""
    configured = os.environ.get("HEADROOM_CACHE_DIR")
    if configured is not None:
        return None if configured.strip().lower() in ("", "off", "0", "none") else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "headroom"


def min_bytes() -> int:
    value = os.environ.get("HEADROOM_CACHE_MIN_BYTES", "")
    return int(value) if value.isdigit() else MIN_BYTES_DEFAULT


def code_version(*files: Path) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


_LOADER_VERSION = code_version(
    *(Path(__file__).with_name(n) for n in _TRACE_CODE), Path(__file__).parent.parent / "data" / "kineto.toml"
)


@dataclass(frozen=True)
class Key:
    entry: Path  # the entry's directory
    lock: Path  # one lock per trace


def key(path: Path, lenient: bool) -> Key | None:
    root = cache_dir()
    if root is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return None
    if st.st_size < min_bytes() or not path.is_file():
        return None
    sampled = sampled_hash(path, st.st_size)
    if sampled is None:
        return None
    trace_id = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:20]
    name = (
        f"{st.st_size}-{st.st_mtime_ns}-{st.st_ino}-{st.st_ctime_ns}-{sampled}-"
        f"{'lenient' if lenient else 'strict'}-{_LOADER_VERSION}"
    )
    return Key(root / trace_id / name, root / f"{trace_id}.lock")


SAMPLE_BYTES = 64 << 10


def sampled_hash(path: Path, size: int) -> str | None:
    """A hash of the file's first, middle and last SAMPLE_BYTES (three reads, whatever its size)."""
    h = hashlib.blake2b(digest_size=8)
    try:
        with open(path, "rb") as f:
            for at in sorted({0, max(0, size // 2 - SAMPLE_BYTES // 2), max(0, size - SAMPLE_BYTES)}):
                f.seek(at)
                h.update(f.read(SAMPLE_BYTES))
    except OSError:
        return None
    return h.hexdigest()
