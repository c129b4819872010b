"""Integer codes for a column of values (pandas.factorize's answer, faster on long repeated text).

pandas.factorize hashes every row's UTF-8 text anew, and kernel names are long and repeat (the
training shape: 90,888 events, 75 distinct names of 283 characters on average). The
tables and attributed events hold one Python str per distinct value (tables._distinct), so such a
column is factorized by object identity (an int64 per row, which pandas hashes in a few ns) and the
few distinct objects are then merged by value: 47.6 -> 9.1 ms on those names (`benchmarks/codes_speed.py
TRACE`, raw benchmarks/results/factorize_by_identity.json). Short
text (op names, 19 characters) hashes as fast as an identity is read, so it goes to pandas, as does
anything but an object array of text.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def factorized(values, use_na_sentinel: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(codes as int64, uniques as an object array), as ``pandas.factorize(values, sort=False,
    use_na_sentinel=...)`` gives them: uniques in order of first appearance, missing values (None, NaN,
    pd.NA) coded -1."""
    if isinstance(values, (list, tuple)):
        values = np.asarray(values, dtype=object)
    if values.dtype != object:
        return _by_pandas(values, use_na_sentinel)
    array = values.to_numpy() if isinstance(values, pd.Series) else np.asarray(values)
    if array.ndim != 1:
        raise ValueError("factorized: one-dimensional values only")
    if len(array) == 0 or _mean_length(array) < LONG_TEXT:
        return _by_pandas(array, use_na_sentinel)
    ids = np.fromiter(map(id, array.tolist()), dtype=np.int64, count=len(array))
    by_object = pd.factorize(ids, sort=False)[0]
    objects = array[_first_rows(by_object)]
    missing = pd.isna(objects)
    if (missing.any() and not use_na_sentinel) or not all(
        m or type(u) is str for u, m in zip(objects.tolist(), missing.tolist())
    ):
        return _by_pandas(array, use_na_sentinel)  # equal objects of other types follow pandas' own rules
    value_code: dict = {}
    merged = np.array(
        [-1 if m else value_code.setdefault(v, len(value_code)) for v, m in zip(objects.tolist(), missing.tolist())],
        dtype=np.int64,
    )
    return merged[by_object], np.fromiter(value_code, dtype=object, count=len(value_code))


LONG_TEXT = 40  # mean characters of a sample of rows from which identity is the faster way
_SAMPLE = 64


def _by_pandas(values, use_na_sentinel: bool) -> tuple[np.ndarray, np.ndarray]:
    codes, uniques = pd.factorize(values, sort=False, use_na_sentinel=use_na_sentinel)
    return codes.astype(np.int64, copy=False), np.asarray(uniques, dtype=object)


def _mean_length(array: np.ndarray) -> float:
    sample = array[np.linspace(0, len(array) - 1, min(len(array), _SAMPLE)).astype(np.int64)]
    return sum(len(v) if isinstance(v, str) else 0 for v in sample.tolist()) / len(sample)


def _first_rows(codes: np.ndarray) -> np.ndarray:
    """The first row of each code (codes numbered in order of first appearance: where the running
    maximum grows)."""
    top = np.maximum.accumulate(codes)
    return np.flatnonzero(np.r_[True, top[1:] > top[:-1]])
