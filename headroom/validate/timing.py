"""Interleaved A/B timing of base and variant, and the speedup with its 95% confidence interval.

GPU clocks and power drift between runs (GEMMs move 4-7% between back-to-back runs on the
H200), so base and variant are measured in alternating blocks of the same length, one
model, the same inputs: round r runs base then variant when r is even, variant then base
when it is odd, so a trend in time cancels out of the pairs. A block is `k` consecutive
steps: CUDA events around each step with no host sync inside the block (steps pipeline as
in real use), one synchronisation at its end; on a CPU a wall clock around each step.

Statistics (`summarise`): each round gives the paired ratio r_i = base_i / variant_i of its
two block means; the speedup is their geometric mean and the 95% interval is
exp(mean(log r) +- t_{0.975, n-1} * sd(log r) / sqrt(n)), Student's t on the log ratios.
`base_ms` and `variant_ms` are the medians of the block means.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

MIN_ROUNDS = 7
# Student's t, two-sided 95%, by degrees of freedom (beyond 30: the normal 1.96 is within 2%).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101,
         19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052,
         28: 2.048, 29: 2.045, 30: 2.042}


def t975(df: int) -> float:
    return _T975.get(df, 1.96) if df >= 1 else math.inf


def _block(step: Callable[[], Any], k: int, device: Any) -> list[float]:
    import torch

    if device.type == "cuda":
        events = []
        for _ in range(k):
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            step()
            e.record()
            events.append((s, e))
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in events]
    out = []
    for _ in range(k):
        t0 = time.perf_counter()
        step()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def steps_per_block(step_ms: float, device: Any, target_s: float | None = None) -> int:
    """Steps per block: long enough to average out per-step jitter (~0.3 s on a GPU, 0.2 s on a CPU)."""
    target = target_s if target_s is not None else (0.3 if device.type == "cuda" else 0.2)
    if not step_ms > 0:
        return 2
    return int(min(50, max(2, math.ceil(target * 1e3 / step_ms))))


def interleave(step: Callable[[], Any], use: Callable[[str], None], device: Any, rounds: int = MIN_ROUNDS,
               k: int | None = None, warmup: int = 2, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the rounds; returns the raw per-step times (what `summarise` and `--from` read)."""
    import torch

    if rounds < MIN_ROUNDS:
        raise ValueError(f"at least {MIN_ROUNDS} rounds")
    warm: dict[str, list[float]] = {}
    for side in ("base", "variant"):
        use(side)
        for _ in range(warmup):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        warm[side] = _block(step, 2, device)
    est = statistics.fmean(warm["base"] + warm["variant"])
    k = k or steps_per_block(est, device)
    out = []
    for r in range(rounds):
        order = ("base", "variant") if r % 2 == 0 else ("variant", "base")
        rec: dict[str, Any] = {"order": list(order)}
        for side in order:
            use(side)
            t0 = time.time()
            rec[f"{side}_ms"] = [round(t, 6) for t in _block(step, k, device)]
            # the block's wall-clock span: lines up GPU clock and power samples taken beside the run
            rec[f"{side}_t"] = [round(t0, 3), round(time.time(), 3)]
        out.append(rec)
        if progress:
            b, v = statistics.fmean(rec["base_ms"]), statistics.fmean(rec["variant_ms"])
            progress(f"round {r + 1}/{rounds}: base {b:.3f} ms, variant {v:.3f} ms ({b / v:.3f}x)")
    use("base")
    return {"method": "cuda-events" if device.type == "cuda" else "wall-clock", "steps_per_block": k,
            "warmup_steps": warmup + 2, "warmup_ms": {s: [round(t, 6) for t in v] for s, v in warm.items()},
            "rounds": out}


def summarise(timing: dict[str, Any]) -> dict[str, Any]:
    """speedup (geometric mean of paired ratios), its 95% CI, median block means, rounds."""
    rounds = timing["rounds"]
    base = [statistics.fmean(r["base_ms"]) for r in rounds]
    var = [statistics.fmean(r["variant_ms"]) for r in rounds]
    logs = [math.log(b / v) for b, v in zip(base, var)]
    n = len(logs)
    mean = statistics.fmean(logs)
    sd = statistics.stdev(logs) if n > 1 else 0.0
    half = t975(n - 1) * sd / math.sqrt(n) if n > 1 else math.inf
    return {"speedup": math.exp(mean), "ci": [math.exp(mean - half), math.exp(mean + half)],
            "base_ms": statistics.median(base), "variant_ms": statistics.median(var), "rounds": n}
