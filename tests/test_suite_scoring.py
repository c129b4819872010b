"""headroom.suites.scoring: KernelBench-style aggregates of a suite document, on a fake result set."""

import math

import pytest

from headroom.jsonio import plain
from headroom.suites.scoring import score


def _r(problem, verdict, speedup=None, memory=None, estimate=None):
    return {
        "problem": problem,
        "candidate": f"{problem}.py",
        "verdict": verdict,
        "speedup": speedup if verdict == "pass" else None,
        "memory_ratio": memory,
        "timing": {"speedup_estimate": estimate} if estimate is not None else {},
    }


DOC = {
    "results": [
        _r("A", "pass", 2.0, 1.0),
        _r("B", "pass", 1.2, 3.0),
        _r("B", "pass", 1.5, 2.0),
        _r("C", "pass", 0.5, 1.0),
        _r("D", "inconclusive", memory=0.5, estimate=1.1),
        _r("E", "fail", memory=9.0),
    ],
    "missing_candidates": ["F"],
}


def test_aggregates_of_known_numbers():
    s = score(DOC)
    assert (s.problems, s.correct, s.wins) == (6, 4, 2)
    assert s.geomean_speedup == pytest.approx((2.0 * 1.5 * 0.5 * 1.1) ** 0.25)  # best of B; D's estimate
    assert s.win_rate == pytest.approx(2 / 6)
    assert s.median_win == pytest.approx(1.75)
    assert s.fast_0 == pytest.approx(4 / 6)
    assert s.fast_p == pytest.approx({"1.0": 2 / 6, "1.5": 1 / 6, "2.0": 0.0})  # "above p": 2.0 is not above 2.0
    assert s.peak_memory_ratio == pytest.approx(1.0)  # (1 * 2 * 1 * 0.5) ** 0.25
    assert s.peak_memory_ratio_max == 2.0  # a failed result's 9.0 is not counted
    verdicts = {p.problem: (p.verdict, p.win) for p in s.per_problem}
    assert verdicts == {
        "A": ("pass", True),
        "B": ("pass", True),
        "C": ("pass", False),
        "D": ("inconclusive", False),
        "E": ("fail", False),
        "F": ("no candidate", False),
    }


def test_nothing_correct():
    s = score({"results": [_r("A", "error"), _r("B", "fail")]})
    assert (s.problems, s.correct, s.wins, s.geomean_speedup, s.median_win) == (2, 0, 0, None, None)
    assert s.fast_p["1.0"] == 0.0 and s.win_rate == 0.0
    assert plain(s)["per_problem"][0]["verdict"] == "error"


def test_a_bad_speedup_is_not_a_number():
    s = score({"results": [_r("A", "pass", float("nan")), _r("B", "pass", 4.0)]})
    assert s.geomean_speedup == 4.0 and s.wins == 1
    assert not math.isnan(s.win_rate)


def test_bench_run_adds_the_aggregates():
    from headroom.suites import dlrm
    from headroom.verify import VerifyOptions
    from headroom.verify.results import VerifyResult

    speedups = {"04_DotInteraction": 3.0, "07_FMInteraction": 0.75}

    def fake(pairs, options, progress):
        return [
            VerifyResult(p.stem, str(cs[0]), "pass", speedup=speedups[p.stem], memory_ratio=1.0, device="cpu")
            for p, cs in pairs
        ]

    doc = dlrm.run(list(speedups), options=VerifyOptions(device="cpu"), run_pairs=fake)
    agg = doc["aggregates"]
    assert (agg["problems"], agg["correct"], agg["wins"]) == (2, 2, 1)
    assert agg["geomean_speedup"] == pytest.approx(1.5) and agg["median_win"] == 3.0
    assert agg["fast_p"] == {"1.0": 0.5, "1.5": 0.5, "2.0": 0.5}
