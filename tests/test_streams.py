"""projection.streams.stream_keys against its definition, row by row in plain Python."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from headroom.projection.streams import stream_keys

VALUES = st.sampled_from([0, 1, 7, "7", "0", 13, 20.0, "20.0", "x", None, math.nan])


def _by_definition(devices, streams) -> list[int]:
    """The pair's text `device/stream`, numbered by first appearance; -1 when either is missing."""
    seen: dict[str, int] = {}
    out = []
    for d, s in zip(devices, streams):
        if (
            d is None
            or s is None
            or (isinstance(d, float) and math.isnan(d))
            or (isinstance(s, float) and math.isnan(s))
        ):
            out.append(-1)
            continue
        out.append(seen.setdefault(f"{d}/{s}", len(seen)))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(VALUES, VALUES), min_size=0, max_size=40))
def test_stream_keys_number_the_pairs_texts_in_order_of_first_appearance(rows):
    devices = [d for d, _ in rows]
    streams = [s for _, s in rows]
    ev = pd.DataFrame({"device": pd.Series(devices, dtype=object), "stream": pd.Series(streams, dtype=object)})
    assert stream_keys(ev).tolist() == _by_definition(devices, streams)


def test_stream_keys_of_typed_columns_and_missing_columns():
    ev = pd.DataFrame({"device": [0, 0, 1, 0], "stream": pd.Categorical(["7", "20", "7", "7"])})
    assert stream_keys(ev).tolist() == [0, 1, 2, 0]
    assert stream_keys(ev[["stream"]]).tolist() == [0, 1, 0, 0]  # no device: every event on "0"
    assert stream_keys(ev[["device"]]).tolist() == [0, 0, 1, 0]
    assert stream_keys(ev.iloc[:0]).dtype == np.int64 and len(stream_keys(ev.iloc[:0])) == 0


INTEGER_DTYPES = st.sampled_from(["int64", "int32", "uint8", "bool"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from([0, 7, 13, 20]), st.sampled_from([0, 1, 7, "7", None])),
        min_size=0,
        max_size=40,
    ),
    INTEGER_DTYPES,
)
def test_stream_keys_of_integer_columns_equal_those_of_the_same_values_as_objects(rows, dtype):
    """Integer columns (a real trace's devices and streams) take codes_and_texts' integer path; they key as
    their texts do, also beside a stream column of mixed objects ("7" and 7 are one stream)."""
    devices = np.array([d for d, _, _ in rows], dtype=dtype)
    typed = pd.DataFrame({"device": devices, "stream": np.array([s for _, s, _ in rows], dtype="int64")})
    assert stream_keys(typed).tolist() == _by_definition(devices.tolist(), [s for _, s, _ in rows])
    mixed = pd.DataFrame({"device": devices, "stream": pd.Series([m for _, _, m in rows], dtype=object)})
    assert stream_keys(mixed).tolist() == _by_definition(devices.tolist(), [m for _, _, m in rows])
