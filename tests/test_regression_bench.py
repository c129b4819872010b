"""benchmarks/regression.py's comparison: the median of per-round ratios against the baseline, 20% allowed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.regression import compare  # noqa: E402

BASELINE = {"ratio": 2.0, "rss_per_mb": 1.5}


def _rounds(ratios: list[float], rss_per_mb: float = 1.5, reference_s: float = 1.0) -> list[dict]:
    return [
        {"mb": 100.0, "reference_s": reference_s, "loader_s": r * reference_s, "loader_rss_mb": rss_per_mb * 100.0}
        for r in ratios
    ]


def test_same_speed_passes():
    v = compare(_rounds([2.0, 1.9, 2.1, 2.05, 1.95]), BASELINE)
    assert v.passed and v.ratio == pytest.approx(2.0)


def test_noise_in_a_few_rounds_passes():
    # two rounds slowed by the machine (a neighbour's job) move the median by a place, not by their size
    v = compare(_rounds([2.0, 4.5, 2.1, 1.9, 5.0, 2.05, 1.95]), BASELINE)
    assert v.passed


def test_a_slower_loader_fails():
    # an extra pass: every round 30% slower against its own reference
    v = compare(_rounds([2.6, 2.5, 2.7, 2.6, 2.65]), BASELINE)
    assert not v.passed and "more than 20%" in v.failures[0]


def test_a_machine_slower_as_a_whole_passes():
    # the reference slows with the loader: the ratios stay
    v = compare(_rounds([2.0, 2.1, 1.9], reference_s=3.0), BASELINE)
    assert v.passed


def test_just_inside_and_just_outside_the_tolerance():
    assert compare(_rounds([2.39] * 3), BASELINE).passed
    assert not compare(_rounds([2.41] * 3), BASELINE).passed


def test_memory_grown_fails():
    v = compare(_rounds([2.0] * 3, rss_per_mb=1.9), BASELINE)
    assert not v.passed and "peak RSS" in v.failures[0]


def test_no_rounds_is_an_error():
    with pytest.raises(ValueError):
        compare([], BASELINE)
