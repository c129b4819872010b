"""The one step-statistics helper."""

from __future__ import annotations

import math

import pytest

from headroom.jsonio import plain
from headroom.stepstats import StepStats


def test_summary_of_known_times():
    s = StepStats([4.0, 1.0, 3.0, 2.0], "wall-clock")
    assert (s.n, s.median_ms, s.mean_ms, s.min_ms, s.max_ms) == (4, 2.5, 2.5, 1.0, 4.0)
    assert s.stdev_ms == pytest.approx(1.2909944)
    assert s.quartiles_ms() == (1.75, 2.5, 3.25)  # inclusive: within the sample's range
    assert s.iqr_rel == pytest.approx(0.6)
    assert plain(s)["times_ms"] == [4.0, 1.0, 3.0, 2.0]


def test_no_and_one_time():
    assert math.isnan(StepStats([]).median_ms) and StepStats([]).iqr_rel is None
    one = StepStats([2.0])
    assert one.quartiles_ms() == (2.0, 2.0, 2.0) and one.stdev_ms == 0.0
