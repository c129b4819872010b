"""A suite's aggregate scores from a `headroom verify` suite document, as KernelBench's scoring reports them.

Every number is over the problems of the suite (the results' problems and the ones without a candidate),
one result per problem: the best of its candidates (a `pass` with the highest speedup, else the first
correct one, else the first).

* correct: verdict `pass` or `inconclusive` (correct, the timing could not call a speedup);
* speedup of a correct result: `speedup` for a `pass`, the timing's point estimate for an `inconclusive`;
* `geomean_speedup`: the geometric mean of the correct results' speedups (KernelBench's "mean speedup
  of correct kernels");
* a win: verdict `pass` with a speedup above 1 (a conclusive one); `win_rate`: wins / problems;
  `median_win`: the median speedup of the wins;
* `fast_p`: the share of problems whose result is a `pass` with a speedup above p (KernelBench's
  fast_p, correct and faster than p); fast_0 is the share of correct results;
* `peak_memory_ratio`: the geometric mean, over the correct results that measured it, of the
  candidate's peak memory over the reference's (`memory_ratio`), and the largest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

FAST_P = (1.0, 1.5, 2.0)
CORRECT = ("pass", "inconclusive")


@dataclass(frozen=True)
class ProblemScore:
    problem: str
    verdict: str
    speedup: float | None  # None: not correct, or no speedup measured
    memory_ratio: float | None
    win: bool


@dataclass(frozen=True)
class SuiteScore:
    problems: int
    correct: int
    wins: int
    geomean_speedup: float | None
    win_rate: float
    median_win: float | None
    fast_0: float
    fast_p: dict[str, float]  # "1.0" -> share
    peak_memory_ratio: float | None  # geometric mean
    peak_memory_ratio_max: float | None
    per_problem: list[ProblemScore] = field(default_factory=list)


def _speedup(r: Mapping[str, Any]) -> float | None:
    if r.get("verdict") == "pass":
        s = r.get("speedup")
    elif r.get("verdict") == "inconclusive":
        s = (r.get("timing") or {}).get("speedup_estimate")
    else:
        return None
    return float(s) if isinstance(s, (int, float)) and s > 0 and math.isfinite(s) else None


def _best(rs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    passes = [r for r in rs if r.get("verdict") == "pass" and _speedup(r) is not None]
    if passes:
        return max(passes, key=lambda r: _speedup(r) or 0.0)
    correct = [r for r in rs if r.get("verdict") in CORRECT]
    return correct[0] if correct else rs[0]


def _geomean(xs: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def score(doc: Mapping[str, Any]) -> SuiteScore:
    """The aggregates of a suite document (`{"results": [...], "missing_candidates": [...]}`)."""
    by_problem: dict[str, list[Mapping[str, Any]]] = {}
    for r in doc.get("results") or []:
        by_problem.setdefault(str(r["problem"]), []).append(r)
    per: list[ProblemScore] = []
    for name in sorted(by_problem):
        r = _best(by_problem[name])
        s = _speedup(r)
        mem = r.get("memory_ratio")
        per.append(
            ProblemScore(
                name,
                str(r.get("verdict")),
                s,
                float(mem) if isinstance(mem, (int, float)) and r.get("verdict") in CORRECT else None,
                r.get("verdict") == "pass" and s is not None and s > 1.0,
            )
        )
    for name in sorted(set(doc.get("missing_candidates") or []) - set(by_problem)):
        per.append(ProblemScore(str(name), "no candidate", None, None, False))
    per.sort(key=lambda p: p.problem)
    n = len(per)
    correct = [p for p in per if p.verdict in CORRECT]
    wins = [p.speedup for p in per if p.win and p.speedup is not None]
    mems = [p.memory_ratio for p in correct if p.memory_ratio is not None and p.memory_ratio > 0]

    def share(k: int) -> float:
        return k / n if n else 0.0

    return SuiteScore(
        problems=n,
        correct=len(correct),
        wins=len(wins),
        geomean_speedup=_geomean([p.speedup for p in correct if p.speedup is not None]),
        win_rate=share(len(wins)),
        median_win=median(wins) if wins else None,
        fast_0=share(len(correct)),
        fast_p={
            f"{p:.1f}": share(sum(1 for q in per if q.verdict == "pass" and q.speedup is not None and q.speedup > p))
            for p in FAST_P
        },
        peak_memory_ratio=_geomean(mems),
        peak_memory_ratio_max=max(mems) if mems else None,
        per_problem=per,
    )
