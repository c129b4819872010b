"""Per-step timing without the profiler: CUDA events on a GPU, a wall clock on the CPU."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from headroom.stepstats import StepStats


class _Timer:
    """Per-step times: CUDA events (no host sync between steps) or a wall clock."""

    def __init__(self, device: Any):
        import torch

        self.cuda = device.type == "cuda"
        self._torch = torch
        self._events: list[tuple[Any, Any]] = []
        self._wall: list[float] = []

    @property
    def method(self) -> str:
        return "cuda-events" if self.cuda else "wall-clock"

    @contextmanager
    def step(self) -> Iterator[None]:
        if self.cuda:
            start = self._torch.cuda.Event(enable_timing=True)
            end = self._torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._events.append((start, end))
        else:
            t0 = time.perf_counter()
            yield
            self._wall.append((time.perf_counter() - t0) * 1e3)

    def results(self, keep: slice = slice(None)) -> StepStats:
        if self.cuda:
            self._torch.cuda.synchronize()
            times = [s.elapsed_time(e) for s, e in self._events]
        else:
            times = list(self._wall)
        return StepStats(times[keep], self.method)


def _sync(device: Any) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
