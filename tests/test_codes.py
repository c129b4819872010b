"""trace/codes.py: factorized equals pandas.factorize (sort=False) on any column of text and missing values,
and hands anything else to pandas."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headroom.trace import codes
from headroom.trace.codes import factorized

VALUES = st.one_of(
    st.sampled_from(["", "a", "b", "aten::mm", "é", "ampere_sgemm_128x64_nn" * 8]),
    st.text(max_size=4),
    st.none(),
    st.just(math.nan),
    st.just(pd.NA),
)


def _same(ours, theirs) -> bool:
    (c1, u1), (c2, u2) = ours, theirs
    return (
        c1.dtype == np.int64
        and np.array_equal(c1, c2)
        and len(u1) == len(u2)
        and all(x == y or (pd.isna(x) and pd.isna(y)) for x, y in zip(list(u1), list(u2)))
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(VALUES, max_size=40), st.booleans(), st.booleans(), st.sampled_from([0, 10**9]))
def test_factorized_equals_pandas_on_text_and_missing_values(values, use_na_sentinel, shared, long_text):
    with mock.patch.object(codes, "LONG_TEXT", long_text):  # 0: by identity, 10**9: by pandas
        _check(values, use_na_sentinel, shared)


def _check(values, use_na_sentinel, shared):
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    if not shared:  # one str object per row, as text read back from Arrow is
        arr[:] = [("" + v + "x")[:-1] if isinstance(v, str) else v for v in values]
    theirs = pd.factorize(arr, sort=False, use_na_sentinel=use_na_sentinel)
    assert _same(factorized(arr, use_na_sentinel), theirs)
    assert _same(factorized(pd.Series(arr, dtype=object), use_na_sentinel), theirs)
    assert _same(
        factorized(list(values), use_na_sentinel),
        pd.factorize(np.asarray(values, dtype=object), sort=False, use_na_sentinel=use_na_sentinel),
    )


def test_factorized_by_hand():
    long = ["void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()", "gemm" * 20]
    twin = ("" + long[0] + "x")[:-1]  # equal text, another object
    assert twin is not long[0]
    got, uniques = factorized(np.array([long[0], None, long[1], twin, math.nan, long[1]], dtype=object))
    assert got.tolist() == [0, -1, 1, 0, -1, 1] and uniques.tolist() == long
    with mock.patch.object(codes, "LONG_TEXT", 10**9):
        assert factorized(np.array(["mm", None, "add", "mm"], dtype=object))[0].tolist() == [0, -1, 1, 0]


def test_first_rows_of_codes_in_order_of_appearance():
    assert codes._first_rows(np.array([0, 0, 1, 0, 2, 1, 3])).tolist() == [0, 2, 4, 6]


@pytest.mark.parametrize(
    "values",
    [
        np.array([1, 1.0, True, "a"], dtype=object),  # a dict would fold 1/1.0/True
        np.array([(1, 2), (1, 2), "a"], dtype=object),
        np.array([3, 1, 3]),
        pd.Series(["b", "a", "b"], dtype="str"),
        pd.Series(pd.Categorical(["b", "a", "b"], categories=["a", "b"])),
    ],
)
def test_anything_but_text_is_pandas_answer(values):
    with mock.patch.object(codes, "LONG_TEXT", 0):
        got, uniques = factorized(values)
    c2, u2 = pd.factorize(values, sort=False)
    assert got.tolist() == list(c2) and [str(u) for u in uniques] == [str(u) for u in np.asarray(u2, dtype=object)]


def test_unhashable_values_are_pandas_answer_or_its_error():
    arr = np.empty(2, dtype=object)
    arr[:] = [[1], [1]]
    with pytest.raises(TypeError):
        pd.factorize(arr)
    with pytest.raises(TypeError), mock.patch.object(codes, "LONG_TEXT", 0):
        factorized(arr)
