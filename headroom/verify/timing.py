"""Timing statistics (pure functions): rounds, medians, a 95% interval, when a result is inconclusive.

The harness times each *phase* itself (``session``): it starts its clock,
wakes the child and sends ``Run`` with ``n`` input sets, and stops the clock
only after it has read samples of every iteration's output from the child's
memory. Per-iteration time = (phase time - overhead) / n, where the overhead
(message round trip, waking the child, reading the samples) is calibrated on
the reference in the same kind of child: null phases (no forward; one more in
every round) and the sample reads of the reference's own phases — their
minimum, a lower bound of the fixed cost, so a loaded moment during
calibration cannot make a later phase's net time negative (what is left
biases speedups toward 1, the conservative side). ``n`` is chosen so that a phase
lasts ``target_phase_ms`` at the reference's speed (overhead amortised) and
its inputs and outputs fit in memory.

Rounds interleave the arms (reference TF32, candidate, and optionally the
strict-FP32 and ``torch.compile`` references) in alternating order — A B,
then B A — so drift in the machine affects both sides alike. The speedup is
the **median of the per-round ratios** reference / candidate, and its 95%
confidence interval is the distribution-free interval for a median from order
statistics: with R ratios sorted, ``[q_(k), q_(R-k+1)]`` for the largest k
with ``P(Binomial(R, 1/2) < k) <= 2.5%`` (R = 6 gives [min, max] at 96.9%;
fewer than 6 rounds give no 95% interval). No resampling, no normality.

A result is ``inconclusive`` (not ``pass``) when: the interval is wider than
``max_ci_ratio`` (hi / lo); a child waited for a CPU more than
``max_wait_fraction`` of its phase (``/proc/<pid>/task/*/schedstat``: another
process loaded the machine); or the reference's times during the candidate's
rounds drifted from its own calibration by more than ``max_reference_drift``
(something — possibly the candidate — slowed the machine while it was
frozen).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    """How timing is run and judged (see the module docstring)."""

    rounds: int | None = None  # None: 10 on a GPU, 8 on a CPU (VerifyOptions.resolved_policy)
    warmup_phases: int = 1
    calibration_phases: int = 5
    target_phase_ms: float = 25.0
    max_iters: int = 200
    max_ci_ratio: float = 1.25
    max_wait_fraction: float = 0.3
    max_reference_drift: float = 1.35
    samples_per_output: int = 256  # elements read from each sampled timed output
    sampled_iterations: int = 32  # timed iterations read per phase (all when fewer; drawn after the reply)


def stats(times: list[float]) -> dict:
    """median, quartiles, min, max, mean and count of a list of times (ms)."""
    if not times:
        return {"n": 0, "median": None}
    xs = sorted(times)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
    med = statistics.median(xs)
    return {"n": len(xs), "median": med, "p25": q[0], "p75": q[2], "min": xs[0], "max": xs[-1],
            "mean": statistics.fmean(xs), "iqr_rel": (q[2] - q[0]) / med if med > 0 else None}


def round_order(arms: list[str], r: int) -> list[str]:
    """Alternating order: arms as given in even rounds, reversed in odd ones (A B, B A, ...)."""
    return list(arms) if r % 2 == 0 else list(reversed(arms))


def iterations(ref_ms: float, target_ms: float, max_iters: int, max_by_memory: int) -> int:
    """Forwards per phase: enough to last ``target_ms``, within memory and ``max_iters``."""
    want = math.ceil(target_ms / max(ref_ms, 1e-4))
    return max(1, min(want, max_iters, max_by_memory))


def _binom_cdf(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    return sum(math.comb(n, i) for i in range(0, k + 1)) / 2 ** n


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float] | None:
    """Distribution-free CI of the median: (lo, hi, coverage), or None with too few values."""
    n = len(values)
    alpha = (1 - level) / 2
    k = 0
    while k + 1 <= n // 2 and _binom_cdf(k, n) <= alpha:
        k += 1
    if k == 0:
        return None
    xs = sorted(values)
    return xs[k - 1], xs[n - k], 1 - 2 * _binom_cdf(k - 1, n)


@dataclass
class Judgement:
    speedup: float | None
    ci: tuple[float, float] | None
    coverage: float | None
    reasons: list[str]  # why the result is inconclusive (empty: conclusive)


def judge(ref_ms: list[float], cand_ms: list[float], policy: Policy, wait_fractions: dict[str, float],
          reference_drift: float | None) -> Judgement:
    """Speedup (median of per-round ratios), its interval, and any reason it cannot be called."""
    ratios = [a / b for a, b in zip(ref_ms, cand_ms) if a > 0 and b > 0]
    reasons: list[str] = []
    if len(ratios) < len(ref_ms) or not ratios:
        reasons.append("a phase took no measurable time after the calibrated overhead (too fast to time)")
    speedup = statistics.median(ratios) if ratios else None
    ci = median_ci(ratios) if ratios else None
    if ci is None:
        reasons.append(f"{len(ratios)} rounds give no 95% interval (at least 6 are needed)")
    elif ci[1] / ci[0] > policy.max_ci_ratio:
        reasons.append(f"the 95% interval of the speedup [{ci[0]:.3g}x, {ci[1]:.3g}x] is wider than "
                       f"{policy.max_ci_ratio:g}x (hi/lo): too noisy to call")
    for who, w in wait_fractions.items():
        if w > policy.max_wait_fraction:
            reasons.append(f"the {who} waited for a CPU {100 * w:.0f}% of the timed phases (median, allowed "
                           f"{100 * policy.max_wait_fraction:.0f}%): another process is loading the machine")
    if reference_drift is not None and not (1 / policy.max_reference_drift <= reference_drift
                                            <= policy.max_reference_drift):
        reasons.append(f"the reference ran {reference_drift:.2f}x its calibrated time during the candidate's "
                       f"rounds: the machine changed speed while it was measured")
    return Judgement(speedup, (ci[0], ci[1]) if ci else None, ci[2] if ci else None, reasons)


def cross_check(wall_ms: float, child_ms: float) -> str | None:
    """A child clock no honest child produces: more forward time than the phase lasted.

    The child's clock covers only its forwards, strictly inside the harness's phase, so a child
    claiming more than the phase's wall time has a tampered clock or rewrote its messages. (A child
    claiming *less* gains nothing — the harness's clock decides — and on a loaded machine an honest
    child's clock legitimately covers a fraction of the harness's phase, so that is not judged.)
    """
    if child_ms > wall_ms * 1.02 + 0.05:
        return (f"the child reported {child_ms:.3f} ms of forwards inside a phase that lasted {wall_ms:.3f} ms "
                f"on the harness's clock")
    return None
