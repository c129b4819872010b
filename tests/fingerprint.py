"""A short fingerprint of a trace's loaded tables: rows, and a hash of every column's values in row order."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

TABLES = ("gpu", "cpu", "launches", "gpu_annotations", "syncs", "flows")


def column_hash(s: pd.Series) -> str:
    h = hashlib.sha256(str(s.dtype).encode())
    if isinstance(s.dtype, pd.CategoricalDtype) or s.dtype == object or isinstance(s.dtype, pd.StringDtype):
        h.update("\x00".join(map(str, s.tolist())).encode())
    else:
        h.update(np.ascontiguousarray(s.to_numpy()).tobytes())
    return h.hexdigest()[:16]


def fingerprint_tables(tables) -> dict:
    """`tables`: a Trace, or a dict of its tables."""
    get = tables.get if isinstance(tables, dict) else lambda t: getattr(tables, t)
    return {t: {"rows": len(get(t)), "columns": {c: column_hash(get(t)[c]) for c in get(t).columns}} for t in TABLES}
