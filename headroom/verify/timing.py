"""How a candidate's timing is run and judged (pure functions; the statistics are ``headroom.measure``).

The harness times each *phase* itself (``session``; on a GPU through the gated clock of ``gate``):
per-forward time = (phase time - overhead) / n, where the overhead subtracted is a lower bound
calibrated on trusted work (the reference's sample reads; null phases of both children, their
minimum), so what is left can only bias a speedup toward 1. ``n`` is chosen so that a phase lasts
``target_phase_ms`` at the reference's speed, within memory and, on a GPU, within the launches a
gated stream queues before its CPU would block (``max_queued_launches``).

Rounds interleave the arms (reference TF32, candidate, on a GPU the strict-FP32 reference, and
optionally ``torch.compile``) in alternating order until the interval of reference / candidate is
``target_width`` tight, ``max_rounds`` were run or ``budget_s`` is spent (``headroom.measure``).
The speedup is the median of the per-round ratios with its order-statistics 95% interval.

A result is ``inconclusive`` (not ``pass``) when the timing cannot be trusted to call it: the
interval is wider than ``max_ci_ratio`` (hi/lo), whether or not it contains 1 (a pass states a
speedup within that ratio at both ends, never "somewhere between 1.01x and 3x"); the two round
orders disagree (the median ratio of the rounds that time the reference first and of those that
time the candidate first differ by more than ``max_order_ratio``: a speedup that exists in one order
only comes from what one child leaves behind for the other, an attack or an artefact); a child or the harness waited for
a CPU more than ``max_wait_fraction`` of its phases (``/proc/<pid>/task/*/schedstat``: another
process loaded the machine; a child's waits count only in phases whose clock they can stretch:
``clock_wait``); the reference ran slower than its own calibration by more than
``max_reference_drift`` while the candidate was measured (what a candidate stealing the reference's
time would cause; a reference that ran *faster* only lowers the speedup, and the interleaved rounds
cancel a machine that sped up); the reference used more CPU time per forward than in its
calibration by more than ``max_reference_cpu`` (interrupts or kernel work charged to it: a
candidate's timers firing on its CPU do not show as run-queue waits); or too few rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from headroom.measure import compare
from headroom.measure.rounds import RoundPolicy, round_order  # noqa: F401  (re-exported)
from headroom.measure.stats import median_ci  # noqa: F401  (re-exported)
from headroom.measure.stats import summary as stats  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class Policy:
    """How timing is run and judged (see the module docstring)."""

    rounds: int | None = None  # minimum rounds (None: 6); more run until the interval is tight
    max_rounds: int | None = None  # None: 40 on a GPU, 30 on a CPU
    target_width: float = 1.02  # stop early once the interval's hi/lo is at most this
    budget_s: float = 30.0  # wall seconds the rounds of one candidate may take (at least the minimum rounds)
    warmup_phases: int = 1
    calibration_phases: int = 5
    target_phase_ms: float = 50.0
    max_iters: int = 2000
    max_queued_launches: int = 900  # a gated GPU stream accepts about this many before its CPU blocks
    enqueue_timeout_s: float = 2.0  # a gated enqueue taking longer waits on the GPU (a host synchronisation)
    max_ci_ratio: float = 1.25  # a pass's interval is at most this wide (hi/lo), slowdowns and speedups alike
    max_order_ratio: float = 1.10  # the medians of the two round orders agree within this ratio
    max_reference_cpu: float = 1.25  # the reference's CPU time per forward in the rounds over its calibration's
    max_wait_fraction: float = 0.3
    max_reference_drift: float = 1.35
    samples_per_output: int = 256  # elements read from each sampled timed output
    sampled_iterations: int = 32  # timed iterations read per phase (all when fewer; drawn after the reply)

    def round_policy(self, cuda: bool) -> RoundPolicy:
        lo = self.rounds or 6
        hi = self.max_rounds or (40 if cuda else 30)
        return RoundPolicy(
            min_rounds=lo, max_rounds=max(lo, hi), target_width=self.target_width, budget_s=self.budget_s
        )


def iterations(
    ref_ms: float, target_ms: float, max_iters: int, max_by_memory: int, max_by_queue: int | None = None
) -> int:
    """Forwards per phase: enough to last ``target_ms``, within memory, ``max_iters`` and the queue."""
    want = math.ceil(target_ms / max(ref_ms, 1e-4))
    caps = [want, max_iters, max_by_memory] + ([max_by_queue] if max_by_queue else [])
    return max(1, min(caps))


@dataclass
class Judgement:
    speedup: float | None
    ci: tuple[float, float] | None
    coverage: float | None
    reasons: list[str]  # why the result is inconclusive (empty: conclusive)


def clock_wait(wait_fraction: float, gated: bool, blocked: bool) -> float | None:
    """A child's wait for a CPU as the phase's clock can feel it; None where it cannot. A gated phase that
    was not blocked times the GPU from the gate's opening to the flag with the child frozen (its enqueue
    finished with the gate shut): its CPU waits, before the freeze, are outside the clock. On a GPU the
    child's CPU time per phase is only its enqueue, so the thaw before it (every thread woken at once, on
    the child's half of the CPUs) is a large share of that time, and honest identical kernels read as 43-73%
    waiting (docs/verify.md, "On the GPU: the sealed harness's run"). A plain phase, or a blocked one (the
    gate opened while the child was still enqueuing), keeps the child's CPU inside the clock."""
    return None if gated and not blocked else wait_fraction


def judge(
    ref_ms: list[float],
    cand_ms: list[float],
    policy: Policy,
    wait_fractions: dict[str, float],
    reference_drift: float | None,
    reference_cpu: float | None = None,
) -> Judgement:
    """Speedup (median of per-round ratios), its interval, and any reason it cannot be called.

    ``ref_ms`` and ``cand_ms`` are in round order: even rounds time the reference first, odd rounds the
    candidate first (``round_order``). ``reference_cpu``: the reference's CPU time per forward in the
    rounds over its calibration's (None: not measured)."""
    c = compare(ref_ms, cand_ms)
    reasons: list[str] = []
    if c.dropped or c.estimate is None:
        reasons.append("a phase took no measurable time after the calibrated overhead (too fast to time)")
    if c.low is None or c.high is None:
        reasons.append(f"{c.rounds} rounds give no 95% interval (at least 6 are needed)")
    elif (c.width or math.inf) > policy.max_ci_ratio:
        reasons.append(
            f"the 95% interval of the speedup [{c.low:.3g}x, {c.high:.3g}x] is wider than "
            f"{policy.max_ci_ratio:g}x (hi/lo): too noisy to call"
        )
    split = order_medians(ref_ms, cand_ms)
    if split is not None:
        first, second = split
        if max(first, second) / min(first, second) > policy.max_order_ratio:
            reasons.append(
                f"the round orders disagree: {first:.3g}x in the rounds that time the reference first, "
                f"{second:.3g}x in those that time the candidate first (allowed {policy.max_order_ratio:g}x "
                f"apart): a speedup in one order only is what one child leaves for the other"
            )
    for who, w in wait_fractions.items():
        if w > policy.max_wait_fraction:
            reasons.append(
                f"the {who} waited for a CPU {100 * w:.0f}% of the timed phases (median, allowed "
                f"{100 * policy.max_wait_fraction:.0f}%): another process is loading the machine"
            )
    if reference_drift is not None and reference_drift > policy.max_reference_drift:
        reasons.append(
            f"the reference ran {reference_drift:.2f}x its calibrated time during the candidate's "
            f"rounds: the machine changed speed while it was measured"
        )
    if reference_cpu is not None and reference_cpu > policy.max_reference_cpu:
        reasons.append(
            f"the reference used {reference_cpu:.2f}x its calibrated CPU time per forward during the "
            f"candidate's rounds (allowed {policy.max_reference_cpu:g}x): interrupts or kernel work "
            f"were charged to it"
        )
    ci = (c.low, c.high) if c.low is not None and c.high is not None else None
    return Judgement(c.estimate, ci, c.coverage, reasons)


def order_medians(ref_ms: list[float], cand_ms: list[float]) -> tuple[float, float] | None:
    """The median ratio reference / candidate of the rounds that time the reference first (even rounds)
    and of those that time the candidate first (odd rounds); None with fewer than 3 of either."""
    import statistics

    ratios = [(r, a / b) for r, (a, b) in enumerate(zip(ref_ms, cand_ms)) if a > 0 and b > 0]
    even = [q for r, q in ratios if r % 2 == 0]
    odd = [q for r, q in ratios if r % 2 == 1]
    if len(even) < 3 or len(odd) < 3:
        return None
    return statistics.median(even), statistics.median(odd)


def cross_check(wall_ms: float, child_ms: float) -> str | None:
    """A child clock no honest child produces: more forward time than the phase lasted.

    The child's clock covers only its forwards, strictly inside the harness's phase, so a child
    claiming more than the phase's wall time has a tampered clock or rewrote its messages. (A child
    claiming *less* gains nothing — the harness's clock decides — and on a loaded machine an honest
    child's clock legitimately covers a fraction of the harness's phase, so that is not judged.)
    """
    if child_ms > wall_ms * 1.02 + 0.05:
        return (
            f"the child reported {child_ms:.3f} ms of forwards inside a phase that lasted {wall_ms:.3f} ms "
            f"on the harness's clock"
        )
    return None
