"""What `headroom profile` reports of a run: the `ProfileResult`, its step statistics in microseconds, and whether
the profiler's overhead can be told from the noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from headroom.jsonio import encoded
from headroom.profile.workload import RunConfig
from headroom.stepstats import StepStats
from headroom.trace.analysis import Analysis
from headroom.trace.layers import LayerExtrapolation


def _stats_us(s: StepStats) -> dict[str, Any]:
    """Step statistics in microseconds, for `headroom profile --json` (docs/cli.md)."""
    us = lambda ms: ms * 1e3  # noqa: E731
    return {
        "n": s.n,
        "method": s.method,
        "median_us": us(s.median_ms),
        "mean_us": us(s.mean_ms),
        "min_us": us(s.min_ms),
        "max_us": us(s.max_ms),
        "stdev_us": us(s.stdev_ms),
        "times_us": [round(us(t), 1) for t in s.times_ms],
    }


@dataclass
class ProfileResult:
    workload: str
    config: RunConfig
    trace_path: Path = field(metadata={"json_key": "trace"})
    manifest_path: Path
    manifest: dict[str, Any]
    timed: StepStats
    profiled: StepStats
    # None for one rank of a --nproc run (the parent analyses the ranks together)
    analysis: Analysis | None = field(metadata=encoded(Analysis.to_dict))
    layers: LayerExtrapolation | None = None

    # `headroom profile --json` (docs/cli.md).
    JSON_KEYS: ClassVar[tuple[str, ...]] = ("workload", "trace_path", "manifest", "timing", "layers", "analysis")

    @property
    def overhead(self) -> float:
        """Profiled over unprofiled median step time, minus one."""
        if not self.timed.times_ms or self.timed.median_ms <= 0:
            return float("nan")
        return self.profiled.median_ms / self.timed.median_ms - 1.0

    @property
    def overhead_measurable(self) -> bool:
        return overhead_verdict(self.timed, self.profiled)[0]

    @property
    def step_ms(self) -> float:
        return self.timed.median_ms

    @property
    def timing(self) -> dict[str, Any]:
        return timing_us(self.timed, self.profiled)


def timing_us(timed: StepStats, profiled: StepStats) -> dict[str, Any]:
    """The `timing` of `headroom profile --json`: both stages in microseconds, the overhead where measurable."""
    measurable = overhead_verdict(timed, profiled)[0]
    overhead = profiled.median_ms / timed.median_ms - 1.0 if timed.n and timed.median_ms > 0 else None
    return {
        "timed": _stats_us(timed),
        "profiled": _stats_us(profiled),
        "overhead": overhead if measurable else None,
        "overhead_measurable": measurable,
    }


MIN_STEPS_FOR_OVERHEAD = 3


def overhead_verdict(timed: StepStats, profiled: StepStats) -> tuple[bool, str]:
    """Whether the profiler's overhead can be told from the noise, and how to say it.

    It needs at least 3 timed and 3 profiled steps; a profiled median *faster* than the unprofiled
    one by more than their spread (interquartile range over the median) is noise, not a measurement
    (a few CPU steps gave "-62%"); a difference inside the spread is "within the noise".
    """
    if timed.n < MIN_STEPS_FOR_OVERHEAD or profiled.n < MIN_STEPS_FOR_OVERHEAD:
        return False, (
            f"not measurable ({timed.n} timed and {profiled.n} profiled step(s); "
            f"needs {MIN_STEPS_FOR_OVERHEAD} of each)"
        )
    overhead = profiled.median_ms / timed.median_ms - 1.0 if timed.median_ms > 0 else float("nan")
    noise = max(timed.iqr_rel or 0.0, profiled.iqr_rel or 0.0)
    if not overhead == overhead or overhead < -noise:
        return False, f"not measurable (profiled steps {100 * -overhead:.0f}% faster than unprofiled: noise)"
    if abs(overhead) <= noise:
        return True, f"within the noise ({100 * overhead:+.1f}%, steps vary by {100 * noise:.1f}%)"
    return True, f"{100 * overhead:+.1f}%"
