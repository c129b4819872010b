"""The phase of a step an event ran in (forward, backward, optimizer), from headroom/data/phases.toml."""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

from headroom.datafiles import shipped

# The phase of a kernel inside a backward op that Kineto links to a forward op (headroom/trace/modules.py).
LINKED_PHASE = "backward"


@lru_cache(maxsize=1)
def _rules() -> tuple[str, tuple[tuple[str, re.Pattern], ...]]:
    doc = shipped("phases.toml")
    rules = tuple((p["name"], re.compile(p["pattern"], re.IGNORECASE)) for p in doc["phase"])
    assert {doc["default"], *(n for n, _ in rules)} <= set(doc["phases"]), "phases.toml names an unknown phase"
    return doc["default"], rules


def phase_names() -> tuple[str, ...]:
    """Every phase, in the order a training step runs them: forward, backward, optimizer."""
    return tuple(shipped("phases.toml")["phases"])


def event_phase(*labels: str, linked: bool = False) -> str:
    """The phase of an event launched under these ops / ranges: the first rule one of them matches.

    `linked`: the event ran in a backward op linked to the forward op that made it; that decides
    the backward rule whatever the names say (rules before it, the optimizer's, still come first)."""
    default, rules = _rules()
    for name, rx in rules:
        if (linked and name == LINKED_PHASE) or any(rx.search(x) for x in labels if x):
            return name
    return default


def event_phases(op: np.ndarray, top_op: np.ndarray, annotation: np.ndarray,
                 linked: np.ndarray | None = None) -> np.ndarray:
    """`event_phase` for every event, evaluated once per distinct combination of labels."""
    n = len(op)
    if n == 0:
        return np.array([], dtype=object)
    keys = pd.DataFrame({"op": op, "top_op": top_op, "annotation": annotation}).astype(object)
    keys = keys.where(keys.notna(), "").astype(str)
    keys["linked"] = np.zeros(n, dtype=bool) if linked is None else np.asarray(linked, dtype=bool)
    codes, uniq = pd.MultiIndex.from_frame(keys).factorize()
    labels = np.array([event_phase(o, t, a, linked=bool(b)) for o, t, a, b in uniq], dtype=object)
    return labels[codes]
