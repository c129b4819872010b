"""Per-step timing without the profiler: CUDA events on a GPU, a wall clock on the CPU."""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator


@dataclass
class StepStats:
    """Per-step times in milliseconds and how they were measured."""

    times_ms: list[float]
    method: str

    @property
    def n(self) -> int:
        return len(self.times_ms)

    @property
    def median_ms(self) -> float:
        return float(statistics.median(self.times_ms)) if self.times_ms else float("nan")

    @property
    def mean_ms(self) -> float:
        return float(statistics.fmean(self.times_ms)) if self.times_ms else float("nan")

    @property
    def min_ms(self) -> float:
        return float(min(self.times_ms)) if self.times_ms else float("nan")

    @property
    def max_ms(self) -> float:
        return float(max(self.times_ms)) if self.times_ms else float("nan")

    @property
    def stdev_ms(self) -> float:
        return float(statistics.stdev(self.times_ms)) if len(self.times_ms) > 1 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "method": self.method, "median_ms": self.median_ms, "mean_ms": self.mean_ms,
                "min_ms": self.min_ms, "max_ms": self.max_ms, "stdev_ms": self.stdev_ms,
                "times_ms": [round(t, 4) for t in self.times_ms]}


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
