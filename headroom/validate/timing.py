"""Interleaved A/B timing of base and variant on ``headroom.measure``: adaptive rounds, one interval method.

GPU clocks and power drift between runs (GEMMs move 4-7% between back-to-back runs on the H200), so base
and variant are measured in alternating blocks of the same length, one model, the same inputs: round r
runs base then variant when r is even, variant then base when it is odd (``headroom.measure.round_order``).
A block is ``k`` consecutive steps timed by a timer of ``headroom.measure.timers`` (``cuda-events`` on a
GPU: no host sync inside the block, steps pipeline as in real use; ``wall-clock`` on a CPU).

Rounds go on (``headroom.measure.interleave_rounds``) after ``min_rounds`` until the interval of the
speedup is ``target_width`` tight (hi/lo), ``max_rounds`` were run or ``budget_s`` is spent, whichever
comes first; ``stop`` says which.

Statistics (``summarise``): each round's value of a side is its block's mean step (the block's time over
its steps); the speedup is the **median of the per-round ratios** base / variant and its interval the
distribution-free order-statistics interval of ``headroom.measure.compare`` (coverage at least 95%, stated).
``noise`` is the standard error of that median on the log scale (``headroom.measure.log_noise``), which
the estimate's calibrated interval adds to its own error (``headroom.projection.calibration``).
``base_ms``/``variant_ms`` are the medians of the block means, ``step_median_ms`` each side's median step
(``headroom.stepstats.StepStats``). Runs saved before this (7 fixed rounds) are summarised the same way.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from headroom.measure import RoundPolicy, compare, default_timer, get_timer, interleave_rounds, log_noise
from headroom.measure.stats import METHOD, MIN_ROUNDS
from headroom.stepstats import StepStats

DEFAULT_MAX_ROUNDS = 40
DEFAULT_TARGET_WIDTH = 1.02  # stop once the 95% interval's hi/lo is this tight (about +-1%)
DEFAULT_BUDGET_S = 120.0  # wall seconds the rounds may take (at least min_rounds run)


def steps_per_block(step_ms: float, device: Any, target_s: float | None = None) -> int:
    """Steps per block: long enough to average out per-step jitter (~0.3 s on a GPU, 0.2 s on a CPU)."""
    target = target_s if target_s is not None else (0.3 if device.type == "cuda" else 0.2)
    if not step_ms > 0:
        return 2
    return int(min(50, max(2, math.ceil(target * 1e3 / step_ms))))


def policy(
    rounds: int = MIN_ROUNDS,
    max_rounds: int | None = None,
    target_width: float | None = None,
    budget_s: float | None = None,
) -> RoundPolicy:
    """Validate's round policy: at least ``rounds``, at most ``max_rounds`` (default 40), until the interval
    is ``target_width`` tight (1.02) or ``budget_s`` (120 s) is spent."""
    if rounds < MIN_ROUNDS:
        raise ValueError(f"at least {MIN_ROUNDS} rounds")
    hi = max(rounds, max_rounds if max_rounds is not None else DEFAULT_MAX_ROUNDS)
    return RoundPolicy(
        min_rounds=rounds,
        max_rounds=hi,
        target_width=target_width if target_width is not None else DEFAULT_TARGET_WIDTH,
        budget_s=budget_s if budget_s is not None else DEFAULT_BUDGET_S,
    )


def _warm(
    step: Callable[[], Any], use: Callable[[str], None], device: Any, timer: Callable, warmup: int
) -> dict[str, list[float]]:
    import torch

    warm: dict[str, list[float]] = {}
    for side in ("base", "variant"):
        use(side)
        for _ in range(warmup):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        warm[side] = timer(step, 2, device)
    return warm


def interleave(
    step: Callable[[], Any],
    use: Callable[[str], None],
    device: Any,
    rounds: int = MIN_ROUNDS,
    k: int | None = None,
    warmup: int = 2,
    progress: Callable[[str], None] | None = None,
    round_policy: RoundPolicy | None = None,
    timer: str | None = None,
) -> dict[str, Any]:
    """Run the rounds; returns the raw per-step times (what ``summarise`` and ``--from`` read)."""
    pol = round_policy or policy(rounds)
    name = timer or default_timer(device)
    clock = get_timer(name, device)
    warm = _warm(step, use, device, clock, warmup)
    k = k or steps_per_block(statistics.fmean(warm["base"] + warm["variant"]), device)
    recs: list[dict[str, Any]] = []

    def measure(side: str, r: int) -> float:
        if len(recs) <= r:
            recs.append({"order": []})
        rec = recs[r]
        rec["order"].append(side)
        use(side)
        t0 = time.time()
        rec[f"{side}_ms"] = [round(t, 6) for t in clock(step, k, device)]
        # the block's wall-clock span: lines up GPU clock and power samples taken beside the run
        rec[f"{side}_t"] = [round(t0, 3), round(time.time(), 3)]
        return statistics.fmean(rec[f"{side}_ms"])

    def on_round(r: int, this: dict[str, float]) -> bool:
        if progress:
            b, v = this["base"], this["variant"]
            progress(f"round {r + 1}: base {b:.3f} ms, variant {v:.3f} ms ({b / v:.3f}x)")
        return True

    done = interleave_rounds(["base", "variant"], measure, pol, on_round=on_round)
    use("base")
    return {
        "method": name,
        "steps_per_block": k,
        "warmup_steps": warmup + 2,
        "warmup_ms": {s: [round(t, 6) for t in v] for s, v in warm.items()},
        "rounds": recs,
        "stop": done.stop,
        "seconds": round(done.seconds, 3),
        "policy": {
            "min_rounds": pol.min_rounds,
            "max_rounds": pol.max_rounds,
            "target_width": pol.target_width,
            "budget_s": pol.budget_s,
        },
    }


def summarise(timing: dict[str, Any]) -> dict[str, Any]:
    """The speedup (median of the rounds' paired ratios), its order-statistics interval and coverage, the
    noise of the median, the median block means, each side's median step, the rounds and why they stopped."""
    rounds = timing["rounds"]
    base = [statistics.fmean(r["base_ms"]) for r in rounds]
    var = [statistics.fmean(r["variant_ms"]) for r in rounds]
    c = compare(base, var)
    steps = {
        s: StepStats([t for r in rounds for t in r[f"{s}_ms"]], timing.get("method", "")) for s in ("base", "variant")
    }
    return {
        "speedup": c.estimate,
        "ci": [c.low, c.high],
        "coverage": c.coverage,
        "noise": log_noise(base, var),
        "method": METHOD,
        "base_ms": statistics.median(base),
        "variant_ms": statistics.median(var),
        "step_median_ms": [steps["base"].median_ms, steps["variant"].median_ms],
        "rounds": c.rounds,
        "stop": timing.get("stop") or "fixed",
    }
