"""Progress callbacks for the stages of a profile run (the CLI renders them; the API is quiet)."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import IO

from headroom.profile.nvtx import nvtx_pop, nvtx_push

# Lines the profiler's C++ side prints on every run (`USDT:... profiler_start`): noise, not news.
NOISE = re.compile(r"^(USDT:|STAGE:|\[W\d+ [\d:.]+ .*(CPUAllocator|profiler_kineto)\.)")


class OutputCapture:
    """What the libraries print while a run is on (Kineto's C++ lines, torch.fx or tqdm warnings, from
    Python or C++, on stdout or stderr): file descriptors 1 and 2 go to a temporary file, and `flush`
    hands the lines written since the last flush to `show`, known noise left out. Used by the CLI's
    live display (printed above it) and by the ranks of a --nproc run (printed as they come)."""

    def __init__(self, show: Callable[[str], None]) -> None:
        self.show = show
        self._file: IO[bytes] | None = None
        self._read = 0

    @contextmanager
    def capturing(self) -> Iterator[None]:
        sys.stdout.flush()
        sys.stderr.flush()
        self._file = file = tempfile.TemporaryFile(mode="w+b")
        saved = [os.dup(1), os.dup(2)]
        os.dup2(file.fileno(), 1)
        os.dup2(file.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            self.flush()
            file.close()
            self._file = None

    def flush(self) -> None:
        if self._file is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        self._file.seek(self._read)
        data = self._file.read()
        self._read += len(data)
        self._file.seek(0, os.SEEK_END)
        for line in data.decode(errors="replace").splitlines():
            if line.strip() and not NOISE.match(line):
                self.show(line)


class Progress:
    """Callbacks for the stages (build, warm-up, timing, profiling, export, classify); the CLI renders
    them, the API is quiet by default."""

    def stage(self, name: str, detail: str = "") -> AbstractContextManager[None]:
        return nullcontext()

    def note(self, message: str) -> None:
        pass


@contextmanager
def _stage(progress: Progress, name: str, detail: str = "") -> Iterator[None]:
    nvtx_push(f"headroom/{name}")
    try:
        with progress.stage(name, detail):
            yield
    finally:
        nvtx_pop()
