"""Ranges per thread: threads as codes of their text (categories, objects, numbers alike), grouped rows,
and the range holding each point found per thread exactly as one point at a time would."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headroom.trace.intervals import (
    codes_and_texts,
    containing_range,
    groups_of,
    previous_greater,
    ranges_on_threads,
    thread_codes,
)


def test_groups_of_keys_each_code_to_its_rows_in_order():
    got = groups_of(np.array([5, 2, 5, -1, 2, 5]))
    assert {k: v.tolist() for k, v in got.items()} == {5: [0, 2, 5], 2: [1, 4], -1: [3]}
    assert groups_of(np.zeros(0, dtype=np.int64)) == {}


def test_thread_codes_compare_text_whatever_the_type():
    table: dict = {}
    ranges = thread_codes(
        pd.Series(["7", "7", "9"], dtype="category"), pd.Series(["1", "2", "1"], dtype="category"), table
    )
    points = thread_codes(np.array([9, "7", 7, None], dtype=object), np.array(["1", 2, "2", "1"], dtype=object), table)
    assert table == {("7", "1"): 0, ("7", "2"): 1, ("9", "1"): 2}
    assert ranges.tolist() == [0, 1, 2]
    assert points.tolist() == [2, 1, 1, -1]  # the number 7 is thread "7"; a missing pid is no thread
    missing = thread_codes(pd.Series(pd.Categorical([None, "7"], categories=["7"])), pd.Series(["1", "1"]), table)
    assert missing.tolist() == [-1, 0]


def _one_point_at_a_time(ranges: pd.DataFrame, pid, tid, points, outermost: bool) -> list[int]:
    rp, rt = ranges["pid"].astype(str).to_numpy(), ranges["tid"].astype(str).to_numpy()
    ts = ranges["ts"].to_numpy(dtype=float)
    end = ts + ranges["dur"].to_numpy(dtype=float)
    out = []
    for p, t, x in zip(pid, tid, points):
        rows = np.flatnonzero((rp == str(p)) & (rt == str(t))) if p is not None else np.zeros(0, dtype=int)
        hit = containing_range(ts[rows], end[rows], np.array([x], dtype=float), outermost)[0] if len(rows) else -1
        out.append(int(rows[hit]) if hit >= 0 else -1)
    return out


threads = st.sampled_from([("1", "1"), ("1", "2"), ("2", "1"), (1, 2)])


@settings(max_examples=60, deadline=None)
@given(
    ranges=st.lists(st.tuples(threads, st.integers(0, 40), st.integers(0, 15)), min_size=1, max_size=25),
    points=st.lists(st.tuples(st.one_of(threads, st.just((None, "1"))), st.integers(0, 60)), max_size=30),
    outermost=st.booleans(),
)
def test_ranges_on_threads_matches_one_point_at_a_time(ranges, points, outermost):
    # Nested or not: per thread, the rows and the points are exactly those one point at a time sees.
    frame = pd.DataFrame(
        {
            "pid": pd.Categorical([str(t[0][0]) for t in ranges]),
            "tid": pd.Categorical([str(t[0][1]) for t in ranges]),
            "ts": [float(t[1]) for t in ranges],
            "dur": [float(t[2]) for t in ranges],
        }
    )
    pid = np.array([p[0][0] for p in points], dtype=object)
    tid = np.array([p[0][1] for p in points], dtype=object)
    at = np.array([float(p[1]) for p in points])
    expected = _one_point_at_a_time(frame, pid, tid, at, outermost)
    assert ranges_on_threads(frame, pid, tid, at, outermost).tolist() == expected
    # The same points given as categorical Series read the same.
    as_series = ranges_on_threads(
        frame,
        pd.Series(pid.astype(str), dtype="category").where(pd.notna(pid)),
        pd.Series(tid.astype(str), dtype="category"),
        at,
        outermost,
    )
    assert as_series.tolist() == expected


@pytest.mark.parametrize("outermost", [False, True])
def test_ranges_on_threads_on_nested_ranges(outermost):
    # Thread A: 0-100 holding 10-50 holding 20-30; thread B: 0-10. Points on A at 25 and 60, on B at 5.
    frame = pd.DataFrame(
        {
            "pid": pd.Categorical(["p", "p", "p", "p"]),
            "tid": pd.Categorical(["A", "A", "A", "B"]),
            "ts": [0.0, 10.0, 20.0, 0.0],
            "dur": [100.0, 40.0, 10.0, 10.0],
        }
    )
    got = ranges_on_threads(
        frame,
        np.array(["p", "p", "p", "q"], dtype=object),
        np.array(["A", "A", "B", "A"], dtype=object),
        np.array([25.0, 60.0, 5.0, 25.0]),
        outermost,
    )
    assert got.tolist() == ([0, 0, 3, -1] if outermost else [2, 0, 3, -1])


def _painted(starts, ends, points):
    """The innermost range by painting: ranges outermost first (start, then longer first), each over the
    points it holds; the last to paint a point wins (headroom's loop before it was vectorised)."""
    out = np.full(len(points), -1)
    for r in np.lexsort((-(ends - starts), starts)).tolist():
        out[(points >= starts[r]) & (points <= ends[r])] = r
    return out


@settings(max_examples=300, deadline=None)
@given(
    ranges=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=30),
    points=st.lists(st.integers(0, 75), max_size=40),
)
def test_innermost_range_is_the_last_to_paint_each_point(ranges, points):
    # Any ranges (nested, overlapping, touching, equal): the same answer as painting them in order.
    starts = np.array([float(a) for a, _ in ranges])
    ends = np.array([float(a + d) for a, d in ranges])
    at = np.array([float(p) for p in points])
    assert containing_range(starts, ends, at).tolist() == _painted(starts, ends, at).tolist()


@given(st.lists(st.integers(-5, 5), max_size=40))
def test_previous_greater_is_the_last_larger_value_before(values):
    v = np.array(values, dtype=np.int64)
    expected = [max((j for j in range(i) if v[j] > v[i]), default=-1) for i in range(len(v))]
    assert previous_greater(v).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-3, 2**40), max_size=40), st.sampled_from(["int64", "int32", "uint8", "bool"]), st.booleans()
)
def test_codes_and_texts_of_integers_equal_those_of_the_same_values_as_objects(values, dtype, as_series):
    """The integer path (factorized as they are) against the general one (as Python objects): the same
    codes, numbered by first appearance, and the same texts."""
    ints = np.array(values, dtype="int64").astype(dtype)
    typed = pd.Series(ints) if as_series else ints
    codes, texts = codes_and_texts(typed)
    ref_codes, ref_texts = codes_and_texts(pd.Series(ints.tolist(), dtype=object))
    assert codes.dtype == np.int64 and codes.tolist() == ref_codes.tolist() and texts == ref_texts
