"""Amdahl's law per device: ``T' = T - sum_i t_i (1 - 1/s_i)`` over the selected events."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.jsonio import plain
from headroom.projection.baseline import Baseline, Breakdown, _breakdown, as_baseline
from headroom.trace.analysis import Analysis


@dataclass
class Projection:
    method: str          # "amdahl" | "replay"
    scenario: str        # "speedups" | "zero_time" | "win_rate_x_median" | "quantile_0.5" | "expected" | ...
    baseline_us: float
    projected_us: float
    num_steps: int
    breakdown: Breakdown
    factor: float | None = None   # the uniform factor applied, for single-factor scenarios
    note: str = ""
    # The same projection on the unprofiled clock (docs/projection.md, "Profiler overhead"), when known.
    unprofiled_baseline_us: float | None = None
    unprofiled_projected_us: float | None = None

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

    def to_dict(self) -> dict[str, Any]:
        d = {"method": self.method, "scenario": self.scenario, "projected_us": self.projected_us,
             "per_step_us": self.per_step_us, "speedup": self.speedup, "gain": self.gain,
             "saved_us": self.saved_us, "breakdown": plain(self.breakdown)}
        if self.factor is not None:
            d["factor"] = self.factor if math.isfinite(self.factor) else None
        if self.note:
            d["note"] = self.note
        if self.unprofiled_baseline_us is not None and self.unprofiled_projected_us is not None:
            base, proj = self.unprofiled_baseline_us, self.unprofiled_projected_us
            d["unprofiled"] = {"baseline_us": base, "projected_us": proj,
                               "per_step_us": proj / self.num_steps if self.num_steps else proj,
                               "speedup": base / proj if proj > 0 else math.inf,
                               "gain": 1.0 - proj / base if base > 0 else 0.0}
        return d


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


def amdahl(base: Baseline | Analysis, factors: np.ndarray | float, mask: np.ndarray | None = None,
           scenario: str = "speedups") -> Projection:
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

