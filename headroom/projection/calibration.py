"""The a-priori estimate's calibrated interval: a stated level, built from what the estimate's error is.

Model. A row is one substitution: the a-priori estimate E (verify's result projected onto the base trace,
no variant run) and validate's interleaved measurement M with its own noise m (the standard error of its
median ratio on the log scale, ``headroom.measure.log_noise``). The estimate's error is e = ln(E / M).
Over the calibration rows the error's scale is its root mean square, s^2 = mean(e_i^2): it holds the
model's error, its bias (the rows' errors lean positive) and the rows' own measurement noise, and it is
taken to be centred on 0 (no bias is removed from the estimate: a bias fitted on one machine's rows need
not hold on another's). For a new estimate whose measurement carries noise m, the interval at level L is

    E x exp(-q) .. E x exp(+q),   q = t_{(1+L)/2, n} x sqrt(s^2 + m^2)

with Student's t on n degrees of freedom (s^2 is a mean of n squares). Both sides are always open: the
downside is never the estimate itself. Adding m counts the measurement's noise twice for the rows (it
is inside s already): the interval is conservative by that much.

What it covers: a measurement by ``headroom validate`` of a substitution like the calibration rows
(eager PyTorch models on one GPU, GPU-bound and launch-bound, faster and slower candidates, one with a
host synchronisation). What it does not: a machine or regime none of the rows had (multi-GPU, torch.compile),
error sources correlated across rows that the rows did not vary (all rows came from one machine); and
with n = 8 the level is nominal, checked by leaving each row out. Rows under CUDA graphs on another GPU
(docs/gpu/apriori-graphs) are checked against it without shaping it (``calibration --check``).

``leave_one_out`` checks it on rows that did not shape it: each row's interval from the others' errors
(a substitution's other runs left out with it). ``python -m headroom.report.calibration DIR`` prints
that check for the committed rows (``--write`` updates ``headroom/data/interval.toml``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from headroom.datafiles import shipped

LEVEL = 0.90


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        even = m * (b - m) * x / ((a + m2 - 1) * (a + m2))
        odd = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))
        for num in (even, odd):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _ibeta(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _ibeta(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on ``t_cdf``)."""
    if not 0 < p < 1:
        raise ValueError("p must be in (0, 1)")
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def regime(launch_bound: bool, graphs: bool) -> str:
    """A row's regime as the tables name it."""
    return ("launch-bound" if launch_bound else "GPU-bound") + (", CUDA graph" if graphs else "")


@dataclass(frozen=True)
class Row:
    """One calibration row: the a-priori estimate, validate's measurement and that measurement's noise."""

    name: str
    estimate: float
    measured: float
    noise: float = 0.0  # log-scale standard error of the measurement
    launch_bound: bool = False
    group: str = ""  # rows of one substitution (another verify or validate run) share a group
    graphs: bool = False  # measured with both sides replayed as CUDA graphs

    @property
    def regime(self) -> str:
        return regime(self.launch_bound, self.graphs)

    @property
    def error(self) -> float:
        """ln(estimate / measured)."""
        return math.log(self.estimate / self.measured)


@dataclass(frozen=True)
class Calibration:
    """The interval's scale: s (RMS log error) over n rows, at a level."""

    scale: float
    rows: int
    level: float = LEVEL
    source: str = ""
    names: tuple[str, ...] = ()  # the rows it was fitted on (a row not among them did not shape it)

    def half_width(self, noise: float = 0.0) -> float:
        """q on the log scale for a measurement with log-scale noise ``noise``."""
        return t_quantile((1 + self.level) / 2, self.rows) * math.sqrt(self.scale**2 + noise**2)

    def interval(self, estimate: float, noise: float = 0.0) -> tuple[float, float]:
        """[low, high] that a measurement of this estimate falls inside with probability ``level``."""
        q = self.half_width(noise)
        return estimate * math.exp(-q), estimate * math.exp(q)

    @property
    def method(self) -> str:
        return (
            f"{100 * self.level:g}% interval: estimate x exp(+-t(df={self.rows}) x sqrt(s^2 + noise^2)), "
            f"s = {self.scale:.4f} the RMS log error of {self.rows} calibration rows"
        )


def fit(rows: Sequence[Row], level: float = LEVEL, source: str = "") -> Calibration:
    """The calibration from rows: s^2 = mean(error^2)."""
    if not rows:
        raise ValueError("no calibration rows")
    return Calibration(
        math.sqrt(sum(r.error**2 for r in rows) / len(rows)), len(rows), level, source, tuple(r.name for r in rows)
    )


def shipped_calibration() -> Calibration:
    """The shipped calibration (``headroom/data/interval.toml``)."""
    d = shipped("interval.toml")["interval"]
    return Calibration(
        float(d["scale"]),
        int(d["rows"]),
        float(d["level"]),
        str(d.get("source", "")),
        tuple(str(n) for n in d.get("names", ())),
    )


@dataclass(frozen=True)
class Check:
    row: Row
    low: float
    high: float

    @property
    def inside(self) -> bool:
        return self.low <= self.row.measured <= self.high


def leave_one_out(rows: Sequence[Row], level: float = LEVEL, fit_rows: Sequence[Row] | None = None) -> list[Check]:
    """Each row's interval from a calibration fitted on ``fit_rows`` (default ``rows``) less every row of its
    group: no row's interval is shaped by its own substitution."""
    pool = list(fit_rows if fit_rows is not None else rows)
    out = []
    for r in rows:
        others = [o for o in pool if (o.group or o.name) != (r.group or r.name)]
        lo, hi = fit(others, level).interval(r.estimate, r.noise)
        out.append(Check(r, lo, hi))
    return out


def coverage(checks: Iterable[Check]) -> tuple[int, int]:
    cs = list(checks)
    return sum(c.inside for c in cs), len(cs)


def toml_text(cal: Calibration) -> str:
    return (
        "# The a-priori estimate's calibrated interval (headroom.projection.calibration; docs/validation.md,\n"
        '# "The interval"). Written by `python -m headroom.report.calibration docs/gpu/apriori --write`\n'
        "# from the committed rows; tests/test_interval_calibration.py recomputes it.\n\n"
        "[interval]\n"
        f"level = {cal.level:g}\n"
        f"scale = {cal.scale:.6f}     # RMS of ln(estimate / measured) over the rows\n"
        f"rows = {cal.rows}\n"
        f'source = "{cal.source}"\n'
        f"names = [{', '.join(repr(n).replace(chr(39), chr(34)) for n in cal.names)}]\n"
    )
