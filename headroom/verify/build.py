"""Build outside the clock: compile a candidate's extensions before it is verified.

A KernelBench candidate that calls ``torch.utils.cpp_extension.load_inline``
(or ``load``) compiles when its module is imported — 55-65 s each on the
H200 host — so without a build step that time would count against the
candidate's own time limit. ``build_all`` imports every such candidate once,
in a *build child* (contained like any candidate child) with its own time
limit (``VerifyOptions.build_timeout``), several at once across the CPU cores
(each with ``MAX_JOBS`` = cores / builds), into a per-run
``TORCH_EXTENSIONS_DIR`` (and ``TRITON_CACHE_DIR``). The verify child then
sets the same directories, so its import finds the build and only loads it.
A failed build is verdict ``error`` with the compiler's first error lines.
Triton kernels compile at their first call: that is the untimed memory
phase, into the same per-run cache.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from headroom.jsonio import rounded
from headroom.verify import protocol as P
from headroom.verify.options import FILE_CAP_BYTES
from headroom.verify.process import Child, ChildFailed, Tampering, last_line

_BUILD_MARKERS = ("load_inline", "cpp_extension")


def needs_build(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(m in text for m in _BUILD_MARKERS)


def build_env(build_dir: str) -> dict[str, str]:
    """The per-run caches every build and verify child of this run uses."""
    return {
        "TORCH_EXTENSIONS_DIR": os.path.join(build_dir, "torch_extensions"),
        "TRITON_CACHE_DIR": os.path.join(build_dir, "triton"),
    }


def new_build_dir() -> str:
    return tempfile.mkdtemp(prefix="headroom-build-")


@dataclass
class BuildResult:
    candidate: str
    ok: bool
    seconds: float = field(metadata=rounded(2))
    error: str | None = None


def compiler_lines(text: str, n: int = 8) -> str:
    """The compiler's first error lines (what a user needs first), else the last line."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    errs = [ln for ln in lines if re.search(r"\berror\b|Error|FAILED", ln)]
    keep = errs[:n] if errs else lines[-n:]
    return "\n".join(keep)[:2000]


def build_one(
    problem: Path,
    candidate: Path,
    device: str,
    build_dir: str,
    timeout: float,
    log_dir: str,
    jobs: int,
    env: dict[str, str] | None = None,
    threads: int | None = None,
) -> BuildResult:
    """Import ``candidate`` in a build child (its extensions compile into ``build_dir``)."""
    t0 = time.monotonic()
    job = P.Job(
        role="build",
        problem=str(problem.resolve()),
        overrides={},
        candidate=str(candidate.resolve()),
        device=device,
        env={**(env or {}), **build_env(build_dir), "MAX_JOBS": str(max(1, jobs))},
        threads=threads,
        log_path=os.path.join(log_dir, f"build.{candidate.stem}.{os.getpid()}.log"),
        file_cap_bytes=FILE_CAP_BYTES,
        init_seed=0,
    )
    child = None
    try:
        child = Child(job, timeout)
        child.goodbye()
        return BuildResult(str(candidate), True, time.monotonic() - t0)
    except ChildFailed as e:
        detail = compiler_lines(e.reason + "\n" + e.log_tail) if "build" in e.reason.lower() or e.log_tail else e.reason
        return BuildResult(str(candidate), False, time.monotonic() - t0, detail or last_line(e.reason))
    except Tampering as e:
        return BuildResult(str(candidate), False, time.monotonic() - t0, f"protocol violation while building: {e}")
    finally:
        if child is not None:
            child.close()


def build_all(
    pairs: list[tuple[Path, Path]],
    device: str,
    build_dir: str,
    timeout: float,
    log_dir: str,
    env: dict[str, str] | None = None,
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, BuildResult]:
    """Build every (problem, candidate) that needs it, ``workers`` at a time; keyed by candidate path."""
    todo = [(p, c) for p, c in pairs if needs_build(c)]
    results: dict[str, BuildResult] = {}
    if not todo:
        return results
    cores = os.cpu_count() or 1
    workers = max(1, min(workers or max(1, cores // 2), len(todo)))
    jobs = max(1, cores // workers)
    lock = threading.Lock()
    queue = list(todo)

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                p, c = queue.pop(0)
            r = build_one(p, c, device, build_dir, timeout, log_dir, jobs, env)
            with lock:
                results[str(c)] = r
            if progress:
                progress(
                    f"built {c.name} in {r.seconds:.1f} s"
                    if r.ok
                    else f"build of {c.name} failed: {(r.error or '').splitlines()[0] if r.error else ''}"
                )

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
