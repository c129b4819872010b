"""The one step-statistics helper: per-step (or per-iteration) times in milliseconds and their summary."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import ClassVar

from headroom.jsonio import rounded


@dataclass
class StepStats:
    """Per-step times in milliseconds and how they were measured (e.g. cuda-events, wall-clock)."""

    times_ms: list[float] = field(metadata=rounded(4))
    method: str = ""

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "n",
        "method",
        "median_ms",
        "mean_ms",
        "min_ms",
        "max_ms",
        "stdev_ms",
        "times_ms",
    )

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

    def quartiles_ms(self) -> tuple[float, float, float]:
        """25th, 50th and 75th percentiles (inclusive method: the sample's own range)."""
        xs = sorted(self.times_ms)
        if not xs:
            return (float("nan"),) * 3
        q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
        return float(q[0]), float(q[1]), float(q[2])

    @property
    def iqr_rel(self) -> float | None:
        """Interquartile range over the median: how noisy the measurement is."""
        p25, med, p75 = self.quartiles_ms()
        return (p75 - p25) / med if self.times_ms and med > 0 else None
