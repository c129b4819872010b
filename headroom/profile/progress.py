"""Progress callbacks for the stages of a profile run (the CLI renders them; the API is quiet)."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import ContextManager, Iterator

from headroom.profile.nvtx import nvtx_pop, nvtx_push


class Progress:
    """Callbacks for the stages (build, warm-up, timing, profiling, export, classify); the CLI renders
    them, the API is quiet by default."""

    def stage(self, name: str, detail: str = "") -> ContextManager[None]:
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
