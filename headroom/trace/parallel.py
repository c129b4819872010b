"""How the loader uses the machine: what it probes (runnable tasks, cores, memory, the cgroup's limit, huge
pages) and what it decides from that (whether the worker process helps, how a file is divided between the
two processes, whether a trace fits in memory). The format code (schema, kineto, scan, document, chunks,
tables, inputs) never imports this module (an import contract in pyproject.toml): what a trace holds does
not depend on the machine that reads it (docs/trace-core.md, "Load").
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from headroom.trace import document
from headroom.trace.kineto import TraceError

# --- the worker process: when it helps ----------------------------------------------------------------

# Start the worker process only for files big enough to repay its start, its imports and its handing back
# (the C scanner decodes several hundred MB a second): side by side, medians of one process against the
# worker, 1.68 vs 1.96 s on a 263 MB trace (slower in each of five rounds), 4.01 vs 3.99 s on 714 MB
# (faster in each of three), 10.62 vs 9.80 s on 2 GB (docs/benchmarks.md).
WORKER_MIN_BYTES = 512 << 20


def workers_wanted() -> int:
    """One worker process when another core is free now: the machine has two or more and, besides this
    process, fewer tasks are runnable than it has other cores (the kernel's count of runnable tasks in
    /proc/loadavg; the 1-minute load average where that is missing, which still counts processes that have
    just ended). On a busy machine a second process only competes (docs/benchmarks.md measures both).
    HEADROOM_LOAD_WORKERS=0 or 1 decides instead."""
    forced = workers_forced()
    if forced is not None:
        return int(forced)
    cores = os.cpu_count() or 1
    if cores < 2:
        return 0
    others = other_runnable_tasks()
    return 1 if others <= cores - 2 else 0


def workers_forced() -> bool | None:
    """What HEADROOM_LOAD_WORKERS decides (0: no worker, 1 or more: the worker), None when it is not set."""
    wanted = os.environ.get("HEADROOM_LOAD_WORKERS")
    if wanted is not None and wanted.strip().isdigit():
        return int(wanted) >= 1
    return None


def other_runnable_tasks() -> float:
    try:
        with open("/proc/loadavg") as f:
            return runnable_others(f.read())
    except (OSError, IndexError, ValueError):
        try:
            return max(os.getloadavg()[0] - 1, 0.0)
        except OSError:
            return 0.0


def runnable_others(loadavg: str) -> int:
    """Tasks runnable now besides the reader, from /proc/loadavg's text ("0.6 0.7 0.7 3/93 29442": 3 runnable)."""
    return max(int(loadavg.split()[3].split("/")[0]) - 1, 0)


def scan_ahead(workers: bool) -> bool:
    """Whether the loader scans the next chunk in a thread while it makes the previous one's tables
    (chunks.decode_chunks): this process may run on two CPUs or more and no worker process of its load
    (`workers`: one may start) takes the other. HEADROOM_SCAN_AHEAD=0 turns it off."""
    if os.environ.get("HEADROOM_SCAN_AHEAD", "").strip() == "0" or not workers:
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return cpus >= 2


def worker_for_file(size: int) -> bool:
    """Whether one file of `size` bytes is decoded with the worker (in two halves, or every other chunk)."""
    return size >= WORKER_MIN_BYTES and bool(workers_wanted())


def worker_for_next(this: Path, nxt: Path) -> bool:
    """Whether the worker decodes the next file of a directory whole while this process decodes `this`: a
    free core, both under WORKER_MIN_BYTES of text (unless asked for) and memory left for two."""
    if not workers_wanted():
        return False
    try:
        texts = (text_bytes(this), text_bytes(nxt))
    except TraceError:
        return False  # e.g. the next file is gone: it is named when its turn comes
    if not workers_forced() and max(texts) >= WORKER_MIN_BYTES:
        # Two big ones at once would double the memory for a small gain (2-11% on 260 MB ranks); a plain
        # file this big is decoded in two halves with the worker instead.
        return False
    available = memory_available()
    return available is None or sum(texts) * MEMORY_PER_TEXT_BYTE < available


# --- the two halves of a plain file: the fitted cost model ------------------------------------------------

# How a plain file is shared between this process and the worker, which first starts (imports) and writes
# its parts to files as it goes, while this process reads them back at the end: both should finish
# together. On the benchmark machine, with the C scanner (docs/benchmarks.md): 0.4 s to start, 2.7 s of
# decoding per GB here, 3.3 s per GB in the worker (its writes included), 0.42 s per GB of the worker's text
# to read its parts back; so this process takes 62% of a 714 MB file and 55% of 2 GB.
WORKER_START_S = 0.4
DECODE_S_PER_BYTE = 2.7e-9
WORKER_S_PER_BYTE = 3.3e-9
READ_BACK_S_PER_BYTE = 0.42e-9


def first_share(size: int) -> float:
    """The share x of the file this process decodes: x·S·d + (1-x)·S·r = w + (1-x)·S·k (d, k: this
    process's and the worker's seconds per byte, r: reading a byte's parts back, w: the worker's start)."""
    size = max(size, 1)
    x = (WORKER_START_S + size * (WORKER_S_PER_BYTE - READ_BACK_S_PER_BYTE)) / (
        size * (DECODE_S_PER_BYTE + WORKER_S_PER_BYTE - READ_BACK_S_PER_BYTE)
    )
    return min(0.75, max(0.5, x))


def spill_base(size: int) -> str | None:
    """Where the worker writes its parts: memory (/dev/shm) when it has room for the whole half's text
    (more than its tables need), else the temporary directory."""
    try:
        shm = os.statvfs("/dev/shm")
        if shm.f_bavail * shm.f_frsize > size:
            return "/dev/shm"
    except OSError:
        pass
    return None


# --- memory ---------------------------------------------------------------------------------------

# Stop with one line, not an OOM kill, when the machine has less than this left while loading.
MEMORY_RESERVE_BYTES = 256 << 20
# Peak memory of a load, per byte of trace text (measured on the benchmark shapes,
# docs/benchmarks.md: 0.3-0.5; the margin covers the analysis that follows).
MEMORY_PER_TEXT_BYTE = 0.8
GZIP_EXPANSION = 12  # a Kineto trace's text is 7-15x its gzip size


@contextmanager
def small_pages():
    """numpy asks the kernel for huge pages for every array of 4 MB or more (madvise); where transparent huge
    pages are given on request (`defrag` = madvise, the kernel's default), each such array's first touch can
    wait for the kernel to compact memory. The tables and analyses of a big trace make many such arrays once:
    on the 2 GB trace, without the requests, 3.2-3.4 s in the kernel instead of 3.5-4.8 s in four rounds side
    by side, faster in three (docs/benchmarks.md). The setting is numpy's, for the whole process: restored after."""
    try:
        from numpy._core import multiarray
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]
    setter = getattr(multiarray, "_set_madvise_hugepage", None)
    if setter is None:  # pragma: no cover - a numpy without the setting
        yield
        return
    previous = setter(False)
    try:
        yield
    finally:
        setter(previous)


# polars' allocator (jemalloc) keeps the pages a freed table held for ten seconds by default, where the next
# stage (pandas, numpy: the C heap) cannot use them: on the 4 GB training trace the process held 1.0 GB more
# after building its pandas tables, and its peak was 0.2 GB higher (docs/benchmarks.md). Given back at once.
POLARS_ALLOCATOR = "dirty_decay_ms:0,muzzy_decay_ms:0"


def polars_gives_memory_back() -> None:
    """Before polars is first imported (its allocator reads this once; the worker process inherits it): freed
    pages go back to the kernel at once. A setting made already (in the environment) is kept; once polars is
    in use this changes nothing for this process."""
    os.environ.setdefault("_RJEM_MALLOC_CONF", POLARS_ALLOCATOR)


def trim_heap() -> None:
    """Give the C heap's free pages back to the kernel (glibc's malloc_trim): the arrays a stage freed stay
    in the process otherwise, under the next stage's peak. Nothing where there is no glibc."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def memory_available() -> int | None:
    """Bytes this process may still use: the machine's MemAvailable, or the cgroup's limit if lower."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        return None
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),):
        try:
            limit = open(limit_file).read().strip()
            if limit != "max":
                left = int(limit) - int(open(usage_file).read())
                available = left if available is None else min(available, left)
        except (OSError, ValueError):
            pass
    return available


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        raise TraceError(document.missing(path)) from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None


def text_bytes(path: Path) -> int:
    """The JSON text a trace file holds: its size, or a gzip file's times GZIP_EXPANSION."""
    size = file_size(path)
    return int(size * (GZIP_EXPANSION if document.is_gzip(path) else 1))


def needed_memory(path: Path) -> int:
    return int(text_bytes(path) * MEMORY_PER_TEXT_BYTE)


def check_memory_for(path: Path) -> None:
    """Before a load: one line when the trace needs more memory than is left."""
    available = memory_available()
    if available is None:
        return
    needed = needed_memory(path)
    if needed > available:
        raise TraceError(
            f"{path}: needs about {needed / 2**30:.1f} GiB of memory to load, {available / 2**30:.1f} GiB is available"
        )


def check_memory_left(path: Path) -> None:
    """After each chunk: one line when less than MEMORY_RESERVE_BYTES is left."""
    available = memory_available()
    if available is not None and available < MEMORY_RESERVE_BYTES:
        raise TraceError(
            f"{path}: ran out of memory while loading ({available / 2**20:.0f} MiB left); "
            f"it needs about {needed_memory(path) / 2**30:.1f} GiB"
        )
