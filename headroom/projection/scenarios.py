"""Distribution scenarios: uniform factors standing for a benchmark's results."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headroom.errors import UserError
from headroom.projection.distributions import Distribution

DEFAULT_QUANTILES = (0.25, 0.5, 0.75, 0.9)


@dataclass(frozen=True)
class Scenario:
    name: str
    factor: float  # applied uniformly to the selected events
    note: str = ""


def distribution_scenarios(
    dist: Distribution | None = None,
    win_rate: float | None = None,
    median: float | None = None,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
) -> list[Scenario]:
    """Uniform factors standing for a benchmark's results.

    * ``win_rate_x_median``: a fraction w of the selected time gets the median winning
      speedup m, the rest none: ``T' = T - w t (1 - 1/m)``, i.e. a uniform factor
      ``1 / (1 - w + w/m)`` (the paper's 8.63% for DLRM: w = 0.417, m = 1.552, t = 58.2%).
    * ``quantile_q``: every selected kernel at the q-quantile of the per-problem speedups
      (failures and losses count as 1.0: one keeps PyTorch's kernel).
    * ``expected``: each problem owning an equal share of the selected time: factor = 1 / mean(1/s).
    """
    out: list[Scenario] = []
    w: float | None
    m: float | None
    if dist is not None:
        if dist.n == 0:
            raise UserError(f"{dist.source or 'distribution'}: no results")
        w = dist.win_rate if win_rate is None else win_rate
        m = dist.median_win if median is None else median
    else:
        w, m = win_rate, median
    if w is not None or m is not None:
        if w is None or m is None:
            raise UserError("give both --win-rate and --median (or a results file)")
        if not (0.0 <= w <= 1.0) or math.isnan(w):
            raise UserError(f"win rate must be in [0, 1], got {w}")
        if not (m > 0) or math.isinf(m):
            raise UserError(f"median speedup must be finite and > 0, got {m}")
        out.append(Scenario("win_rate_x_median", 1.0 / (1.0 - w + w / m), f"win rate {w:.3f} x median speedup {m:.3f}"))
    if dist is not None:
        e = dist.effective()
        for q in quantiles:
            if not 0.0 <= q <= 1.0:
                raise UserError(f"quantile must be in [0, 1], got {q}")
            out.append(Scenario(f"quantile_{q:g}", float(np.quantile(e, q)), f"q{q:g} of {dist.n} results"))
        out.append(Scenario("expected", float(1.0 / np.mean(1.0 / e)), f"harmonic mean of {dist.n} results"))
    return out
