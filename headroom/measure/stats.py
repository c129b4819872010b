"""The statistics of paired A/B measurements: one estimate, one interval, no resampling.

Each round measures both sides back to back (``rounds``), so a round's ratio A/B cancels what
drifts slower than a round (clocks, temperature, other tenants). The estimate is the **median of
the per-round ratios** and its 95% interval the distribution-free interval of a median from order
statistics: with R ratios sorted, ``[q_(k), q_(R-k+1)]`` for the largest k with
``P(Binomial(R, 1/2) < k) <= 2.5%`` (R = 6: [min, max] at 96.9%; R = 10: [2nd, 9th] at 97.9%;
fewer than 6 rounds: no interval). It assumes only that rounds are independent: one loaded round
moves it by one rank, not by its size (a t-interval on the mean would widen with the outlier).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

METHOD = "median of per-round ratios; 95% interval from order statistics (distribution-free)"
MIN_ROUNDS = 6


def _binom_cdf(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    return sum(math.comb(n, i) for i in range(0, k + 1)) / 2**n


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float] | None:
    """Distribution-free interval of the median: (lo, hi, coverage), or None with too few values."""
    n = len(values)
    alpha = (1 - level) / 2
    k = 0
    while k + 1 <= n // 2 and _binom_cdf(k, n) <= alpha:
        k += 1
    if k == 0:
        return None
    xs = sorted(values)
    return xs[k - 1], xs[n - k], 1 - 2 * _binom_cdf(k - 1, n)


def summary(times: list[float]) -> dict[str, float | int | None]:
    """median, quartiles, min, max, mean and count of a list of times (the one step-statistics helper,
    ``headroom.stepstats.StepStats``, as a dict)."""
    from headroom.stepstats import StepStats

    if not times:
        return {"n": 0, "median": None}
    st = StepStats(list(times))
    p25, _, p75 = st.quartiles_ms()
    return {
        "n": st.n,
        "median": st.median_ms,
        "p25": p25,
        "p75": p75,
        "min": st.min_ms,
        "max": st.max_ms,
        "mean": st.mean_ms,
        "iqr_rel": st.iqr_rel,
    }


@dataclass(frozen=True)
class Comparison:
    """A/B from paired rounds: ``estimate`` = median of a_i / b_i, with its interval."""

    estimate: float | None
    low: float | None
    high: float | None
    coverage: float | None
    rounds: int
    dropped: int  # rounds with a non-positive side (no ratio)

    @property
    def width(self) -> float | None:
        """hi / lo of the interval (1 is a point)."""
        if self.low is None or self.high is None or self.low <= 0:
            return None
        return self.high / self.low

    def excludes(self, value: float) -> bool:
        return self.low is not None and self.high is not None and not (self.low <= value <= self.high)


def compare(a: list[float], b: list[float], level: float = 0.95) -> Comparison:
    """Paired ratios a_i / b_i (rounds where either side is not positive are dropped and counted)."""
    ratios = [x / y for x, y in zip(a, b) if x > 0 and y > 0]
    dropped = min(len(a), len(b)) - len(ratios)
    if not ratios:
        return Comparison(None, None, None, None, 0, dropped)
    ci = median_ci(ratios, level)
    est = statistics.median(ratios)
    if ci is None:
        return Comparison(est, None, None, None, len(ratios), dropped)
    return Comparison(est, ci[0], ci[1], ci[2], len(ratios), dropped)


def log_noise(a: list[float], b: list[float]) -> float | None:
    """The standard error, on the log scale, of the median of the paired ratios a_i / b_i: 1.2533 (a median's
    efficiency) x 1.4826 MAD (a robust standard deviation) / sqrt(R). What a measurement's own noise adds to
    a prediction of it (``headroom.projection.calibration``); None with fewer than two ratios."""
    logs = [math.log(x / y) for x, y in zip(a, b) if x > 0 and y > 0]
    if len(logs) < 2:
        return None
    med = statistics.median(logs)
    mad = statistics.median([abs(v - med) for v in logs])
    return 1.2533 * 1.4826 * mad / math.sqrt(len(logs))
