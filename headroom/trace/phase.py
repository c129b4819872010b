"""Phase of a kernel in a training step: forward, backward or optimizer (patterns in ranges.py)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from headroom.trace.ranges import BACKWARD_PATTERN, OPTIMIZER_PATTERN

_OPTIMIZER_RX = re.compile(OPTIMIZER_PATTERN, re.IGNORECASE)
_BACKWARD_RX = re.compile(BACKWARD_PATTERN, re.IGNORECASE)


def event_phase(*labels: str, backward: bool = False) -> str:
    """forward | backward | optimizer for an event launched under these ops / ranges."""
    if any(_OPTIMIZER_RX.search(x) for x in labels if x):
        return "optimizer"
    if backward or any(_BACKWARD_RX.search(x) for x in labels if x):
        return "backward"
    return "forward"


def event_phases(op: np.ndarray, top_op: np.ndarray, annotation: np.ndarray,
                 backward: np.ndarray | None = None) -> np.ndarray:
    """`event_phase` for every event, evaluated once per distinct combination of labels."""
    n = len(op)
    if n == 0:
        return np.array([], dtype=object)
    linked = np.zeros(n, dtype=bool) if backward is None else np.asarray(backward, dtype=bool)
    keys = pd.DataFrame({"op": op, "top_op": top_op, "annotation": annotation, "linked": linked})
    keys[["op", "top_op", "annotation"]] = keys[["op", "top_op", "annotation"]].astype(object).where(
        keys[["op", "top_op", "annotation"]].notna(), "").astype(str)
    codes, uniq = pd.MultiIndex.from_frame(keys).factorize()
    labels = np.array([event_phase(o, t, a, backward=bool(b)) for o, t, a, b in uniq], dtype=object)
    return labels[codes]
