"""Amdahl's law per device: ``T' = T - sum_i t_i (1 - 1/s_i)`` over the selected events."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.jsonio import OMIT_NONE, SKIP, encoded, omit_if
from headroom.projection.baseline import Baseline, Breakdown, _breakdown, as_baseline
from headroom.trace.analysis import Analysis


@dataclass
class Projection:
    method: str  # "amdahl" | "replay"
    scenario: str  # "speedups" | "zero_time" | "win_rate_x_median" | "quantile_0.5" | "expected" | ...
    baseline_us: float
    projected_us: float
    num_steps: int
    breakdown: Breakdown
    # The uniform factor applied, for single-factor scenarios (an infinite one written as null).
    factor: float | None = field(
        default=None, metadata={**OMIT_NONE, **encoded(lambda f: f if math.isfinite(f) else None)}
    )
    note: str = field(default="", metadata=omit_if(lambda p: not p.note))
    # The same projection on the unprofiled clock (docs/projection.md, "Profiler overhead"), when known.
    unprofiled_baseline_us: float | None = field(default=None, metadata=SKIP)
    unprofiled_projected_us: float | None = field(default=None, metadata=SKIP)

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "method",
        "scenario",
        "projected_us",
        "per_step_us",
        "speedup",
        "gain",
        "saved_us",
        "breakdown",
        "factor",
        "note",
        "unprofiled",
    )
    # `unprofiled` is left out when unknown.
    JSON_META: ClassVar[dict[str, dict[str, Any]]] = {"unprofiled": OMIT_NONE}

    @property
    def speedup(self) -> float:
        return self.baseline_us / self.projected_us if self.projected_us > 0 else math.inf

    @property
    def gain(self) -> float:
        """Fraction of the baseline time saved (the paper's "x% end-to-end")."""
        return 1.0 - self.projected_us / self.baseline_us if self.baseline_us > 0 else 0.0

    @property
    def saved_us(self) -> float:
        return self.baseline_us - self.projected_us

    @property
    def per_step_us(self) -> float:
        return self.projected_us / self.num_steps if self.num_steps else self.projected_us

    @property
    def unprofiled(self) -> OnUnprofiled | None:
        """The same projection on the unprofiled clock, when known."""
        if self.unprofiled_baseline_us is None or self.unprofiled_projected_us is None:
            return None
        return OnUnprofiled(self.unprofiled_baseline_us, self.unprofiled_projected_us, self.num_steps)


@dataclass(frozen=True)
class OnUnprofiled:
    """A projection's window before and after on the unprofiled clock."""

    baseline_us: float
    projected_us: float
    num_steps: int = field(metadata=SKIP)

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("baseline_us", "projected_us", "per_step_us", "speedup", "gain")

    @property
    def per_step_us(self) -> float:
        return self.projected_us / self.num_steps if self.num_steps else self.projected_us

    @property
    def speedup(self) -> float:
        return self.baseline_us / self.projected_us if self.projected_us > 0 else math.inf

    @property
    def gain(self) -> float:
        return 1.0 - self.projected_us / self.baseline_us if self.baseline_us > 0 else 0.0


def _factor_array(b: Baseline, factors: np.ndarray | float | None, mask: np.ndarray | None) -> np.ndarray:
    n = len(b.events)
    if isinstance(factors, np.ndarray):
        if factors.shape != (n,):
            raise ValueError(f"factors has shape {factors.shape}, expected ({n},)")
        f = factors.astype(float)
    else:
        f = np.ones(n)
        if factors is not None:
            f[mask if mask is not None else slice(None)] = float(factors)
    if np.any(~(f > 0)):
        raise UserError("speedup factors must be > 0")
    return f


def amdahl(
    base: Baseline | Analysis, factors: np.ndarray | float, mask: np.ndarray | None = None, scenario: str = "speedups"
) -> Projection:
    """``T' = T - sum t_i (1 - 1/s_i)`` per device (t_i = the event's wall share), idle held fixed."""
    b = as_baseline(base)
    f = _factor_array(b, factors, mask)
    ev = b.events
    wall = ev["wall_us"].to_numpy(dtype=float)
    saved = wall * (1.0 - 1.0 / f)
    devices = ev["device"].to_numpy() if "device" in ev.columns else np.zeros(len(ev))
    per_dev = pd.Series(saved).groupby(devices).sum() if len(ev) else pd.Series(dtype=float)
    max_saved_slowest = float(per_dev.min()) if len(per_dev) else 0.0
    # Each device finishes `saved_d` earlier; the window ends with the slowest device.
    projected = b.wall_us - (max_saved_slowest if len(per_dev) > 1 else float(saved.sum()))
    new_shares = wall - saved
    bd = _breakdown(b, new_shares, projected)
    uniform = float(f[f != 1.0][0]) if np.any(f != 1.0) and np.all(f[f != 1.0] == f[f != 1.0][0]) else None
    return Projection("amdahl", scenario, b.wall_us, projected, b.num_steps, bd, uniform)
