"""Profiler-overhead correction: the replay's CPU clock scaled so the replayed base step equals the
step measured without the profiler.

The profiler slows the CPU (every op and launch is recorded), rarely the GPU. Where the unprofiled
step time is known -- `headroom profile` records it in the trace's manifest (``timing.step_ms``, the
median of timed steps without the profiler), or the user gives ``--step-ms`` -- the replay runs the
CPU timeline at a constant speed `scale` <= 1 (every CPU interval between blocking waits shrinks by
that factor; a wait for the GPU lasts as long as the GPU needs) and `scale` is solved so that the
replay with no change spans ``step_ms x steps``. A GPU-bound trace needs no correction (the CPU was
ahead anyway); a launch-bound one is compressed nearly in proportion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from headroom.errors import UserError
from headroom.jsonio import member
from headroom.projection.baseline import Baseline
from headroom.projection.cpu import window_records
from headroom.projection.replay import replay

TOLERANCE = 1e-6  # relative error of the replayed base window the solve stops at
MAX_ITERATIONS = 40
# A profiled step less than this much slower than the unprofiled one is run-to-run drift, not profiler
# overhead: the shipped H200 traces' timed steps spread 0.3-2.9% (stdev over median), and a GPU-bound
# trace's replayed step barely moves with the CPU's speed, so correcting within the noise would make the
# CPU arbitrarily fast. Twice the timed steps' relative stdev, when the manifest records it, if larger.
MIN_OVERHEAD = 0.02


@dataclass(frozen=True)
class Unprofiled:
    """The unprofiled step and the CPU speed that reproduces it."""

    step_us: float  # unprofiled step time (the target)
    source: str  # "manifest" | "--step-ms"
    cpu_scale: float  # the replay's CPU clock speed (1.0: no correction)
    baseline_us: float  # the base window on the unprofiled clock: the replay at cpu_scale x window_scale
    profiled_step_us: float  # the measured (profiled) window per step
    num_steps: int
    reached: bool  # False: even an infinitely fast CPU leaves the replayed step above the target
    note: str = ""
    # The same overhead as a cost per profiler record (range or runtime call) instead of a clock speed:
    # (profiled - unprofiled window) / records in the window. The estimate's interval uses both models.
    per_record_us: float = 0.0
    # Every replayed window on the unprofiled clock is scaled by this: the target over the replayed base
    # at `cpu_scale`. So the base is the unprofiled step that is printed, and every ratio printed beside
    # it is of two printed times. About 1 where the solve reached the target; where the profiled steps
    # are within drift of it (not corrected), the drift; where even a free CPU leaves the replay above
    # it (`reached` False), the GPU work itself ran slower under the profiler, by this much.
    window_scale: float = 1.0
    # Where `cpu_scale` comes from: "step" (the solve above) or "calls" (calls measured outside the
    # profiler, where the step leaves it open or reads a slower GPU as CPU: entry_calls.clock_from_calls).
    clock_source: str = "step"

    # `project --json`'s `unprofiled`: the base per step among the fields, num_steps and clock_source not.
    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "step_us",
        "source",
        "cpu_scale",
        "baseline_us",
        "per_step_us",
        "profiled_step_us",
        "overhead",
        "reached",
        "per_record_us",
        "window_scale",
        "note",
    )

    @property
    def per_step_us(self) -> float:
        return self.baseline_us / max(self.num_steps, 1)

    @property
    def overhead(self) -> float:
        """Profiled over unprofiled step, minus one."""
        return self.profiled_step_us / self.step_us - 1.0 if self.step_us > 0 else math.nan


def cpu_clock(scale: float) -> str:
    """The replay's CPU clock in words: "CPU clock x0.412", or "the CPU taken as free" at 0 (not "x0.000",
    which reads as a rounded speed)."""
    if scale == 0:
        return "the CPU taken as free"
    return f"CPU clock x{scale:.3f}" if scale >= 0.001 else f"CPU clock x{scale:.2g}"


def _number(v: object) -> float | None:
    """A JSON number (not a bool) as a float, else None."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def noise(b: Baseline) -> float:
    """The smallest profiled-over-unprofiled excess the correction treats as profiler overhead."""
    timing = member(b.manifest, "timing")
    timed = member(timing, "timed")
    sd, med = _number(timed.get("stdev_ms")), _number(timed.get("median_ms"))
    rel = sd / med if sd is not None and med is not None and med > 0 and math.isfinite(sd) else 0.0
    return max(MIN_OVERHEAD, 2.0 * rel)


MAX_STEP_MS = 3.6e6  # --step-ms: a step of an hour is the longest taken as a step time


def unprofiled_step_us(b: Baseline | None, step_ms: float | None = None) -> tuple[float | None, str]:
    """The unprofiled step time in us and where it came from: --step-ms, else the trace's manifest."""
    if step_ms is not None:
        if (
            isinstance(step_ms, bool)
            or not isinstance(step_ms, (int, float))
            or not math.isfinite(step_ms)
            or step_ms <= 0
        ):
            raise UserError(f"--step-ms must be a positive number of milliseconds, got {step_ms!r}")
        if step_ms > MAX_STEP_MS:
            raise UserError(f"--step-ms {step_ms:g}: more than an hour ({MAX_STEP_MS:,.0f} ms) is no step time")
        return 1000.0 * float(step_ms), "--step-ms"
    if b is None:
        return None, ""
    timing = member(b.manifest, "timing")
    v = timing.get("step_ms")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
        return 1000.0 * float(v), "manifest"
    return None, ""


def gpu_busy_per_step_us(b: Baseline | Any) -> float:
    """The busiest device's GPU busy time (union of its activities) per step; 0 without GPU events."""
    if b.mode != "gpu" or not len(b.events):
        return 0.0
    from headroom.trace.accounting import busy_per_device

    return max(busy_per_device(b.events).values()) / max(b.num_steps, 1)


def check_step_ms(b: Baseline | Any, step_ms: float) -> None:
    """Refuse a user's unprofiled step (`--step-ms`) that the trace itself rules out: shorter than the
    GPU's own busy time per step. The replay would have to shrink kernels to reach it (negative
    projected steps, an "infx" speedup). (A measured step, e.g. validate's, is not checked: there the
    GPU may have run slower under the profiler, which the correction reports.)"""
    unprofiled_step_us(b, step_ms)  # a positive, finite number
    busy = gpu_busy_per_step_us(b)
    if 1000.0 * step_ms < busy:
        raise UserError(
            f"--step-ms {step_ms:g}: shorter than the GPU's own busy time in {b.source} "
            f"({busy / 1e3:,.3f} ms per step): a step cannot take less than its kernels"
        )


def solve_cpu_scale(b: Baseline, step_us: float, source: str = "manifest") -> Unprofiled:
    """The CPU clock speed at which the replay with no change spans `step_us` per step."""
    steps = max(b.num_steps, 1)
    target = step_us * steps
    prof = b.wall_us / steps

    def window(scale: float) -> float:
        return replay(b, cpu_scale=scale).projected_us

    w1 = window(1.0)
    if w1 <= target * (1 + TOLERANCE):
        return Unprofiled(
            step_us,
            source,
            1.0,
            target,
            prof,
            steps,
            True,
            "the profiled steps are not slower than the unprofiled ones",
            window_scale=target / w1,
        )
    limit = noise(b)
    if w1 <= target * (1 + limit):
        return Unprofiled(
            step_us,
            source,
            1.0,
            target,
            prof,
            steps,
            True,
            f"the profiled steps are {100 * (w1 / target - 1):.1f}% slower than the unprofiled ones, "
            f"within run-to-run drift ({100 * limit:.1f}%)",
            window_scale=target / w1,
        )
    w0 = window(0.0)
    if w0 >= target * (1 - TOLERANCE):
        return Unprofiled(
            step_us,
            source,
            0.0,
            target,
            prof,
            steps,
            False,
            f"even with no CPU time the replayed step is {w0 / steps / 1e3:.3f} ms, above the "
            f"unprofiled {step_us / 1e3:.3f} ms: the GPU work itself ran slower under the profiler; "
            f"the CPU side is taken as free and the GPU timeline scaled x{target / w0:.4f}",
            window_scale=target / w0,
        )
    # Illinois (regula falsi): the window is monotone and piecewise linear in the scale.
    lo, hi, f_lo, f_hi = 0.0, 1.0, w0 - target, w1 - target
    side = 0
    x, wx = hi, w1
    for _ in range(MAX_ITERATIONS):
        x = hi - f_hi * (hi - lo) / (f_hi - f_lo) if f_hi != f_lo else 0.5 * (lo + hi)
        wx = window(x)
        fx = wx - target
        if abs(fx) <= TOLERANCE * target:
            break
        if fx > 0:
            hi, f_hi = x, fx
            if side == 1:
                f_lo /= 2
            side = 1
        else:
            lo, f_lo = x, fx
            if side == -1:
                f_hi /= 2
            side = -1
    records = window_records(b)
    return Unprofiled(
        step_us,
        source,
        float(x),
        target,
        prof,
        steps,
        True,
        per_record_us=(w1 - target) / records if records else 0.0,
        window_scale=target / float(wx),
    )
