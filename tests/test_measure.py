"""headroom.measure: the one interval method and the interleaved rounds with their stopping rule."""

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headroom.measure import RoundPolicy, compare, interleave_rounds, median_ci, round_order


def test_median_ci_order_statistics():
    assert median_ci([1.0] * 5) is None  # 5 values cannot give 95%
    lo, hi, cov = median_ci([5, 1, 4, 2, 6, 3])
    assert (lo, hi) == (1, 6) and cov == pytest.approx(1 - 2 / 64)
    lo, hi, cov = median_ci(list(range(1, 11)))
    assert (lo, hi) == (2, 9) and cov == pytest.approx(1 - 2 * 11 / 1024)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 100), min_size=6, max_size=60, unique=True))
def test_median_ci_brackets_the_median_and_is_symmetric_in_rank(xs):
    lo, hi, cov = median_ci(xs)
    s = sorted(xs)
    k = s.index(lo)
    assert lo <= s[len(s) // 2] <= hi and cov >= 0.95
    assert s[len(s) - 1 - k] == hi


def test_median_ci_covers_the_true_median_at_least_95_percent():
    rng = random.Random(7)
    hits = 0
    for _ in range(2000):
        lo, hi, _ = median_ci([rng.lognormvariate(0.0, 0.1) for _ in range(10)])
        hits += lo <= 1.0 <= hi
    assert hits / 2000 >= 0.95


def test_compare_drops_rounds_without_a_ratio_and_says_so():
    c = compare([2.0, 2.0, 0.0, 2.0, 2.0, 2.0, 2.0], [1.0] * 7)
    assert c.dropped == 1 and c.rounds == 6 and c.estimate == 2.0 and c.width == 1.0
    assert c.excludes(1.0) and not c.excludes(2.0)
    assert compare([], []).estimate is None


def test_rounds_alternate_and_stop_once_tight():
    seen = []

    def measure(arm, r):
        seen.append((r, arm))
        return 10.0 if arm == "a" else 5.0

    out = interleave_rounds(["a", "b"], measure, RoundPolicy(min_rounds=6, max_rounds=30, target_width=1.02))
    assert out.stop == "tight" and len(out.values["a"]) == 6
    assert out.orders[:2] == [["a", "b"], ["b", "a"]] and round_order(["a", "b", "c"], 1) == ["c", "b", "a"]
    assert compare(out.values["a"], out.values["b"]).estimate == 2.0


def test_rounds_run_to_the_maximum_when_noisy_and_stop_when_a_check_fails():
    rng = random.Random(1)
    noisy = interleave_rounds(
        ["a", "b"], lambda arm, r: rng.uniform(1, 3), RoundPolicy(min_rounds=6, max_rounds=11, target_width=1.02)
    )
    assert noisy.stop == "max_rounds" and len(noisy.values["b"]) == 11
    stopped = interleave_rounds(
        ["a", "b"], lambda arm, r: 1.0, RoundPolicy(min_rounds=6, max_rounds=20), on_round=lambda r, v: r < 2
    )
    assert stopped.stop == "stopped" and len(stopped.values["a"]) == 3


def test_rounds_stop_on_the_net_values():
    # raw phases 10 and 10.5 (ratio 0.95, tight) but the overhead of 9.9 makes the net ratio noisy
    vals = itertools.cycle([0.0, 0.3])
    out = interleave_rounds(
        ["a", "b"],
        lambda arm, r: 10.0 if arm == "a" else 10.0 + next(vals),
        RoundPolicy(min_rounds=6, max_rounds=9, target_width=1.02),
        net=lambda arm, v: v - 9.9,
    )
    assert out.stop == "max_rounds"
    assert not math.isclose(compare(out.values["a"], out.values["b"]).width or 0, 1.0)
