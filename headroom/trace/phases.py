"""The phase of a step an event ran in (forward, backward, optimizer), from headroom/data/phases.toml."""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from headroom.datafiles import shipped
from headroom.trace.codes import factorized

# The phase of a kernel inside a backward op that Kineto links to a forward op (headroom/trace/modules.py).
LINKED_PHASE = "backward"
# Label combinations are numbered in one int64 while they fit (else rows of codes are compared).
ONE_KEY_LIMIT = 2**61


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


def event_phases(
    op: np.ndarray, top_op: np.ndarray, annotation: np.ndarray, linked: np.ndarray | None = None
) -> np.ndarray:
    """`event_phase` for every event, evaluated once per distinct combination of labels."""
    n = len(op)
    if n == 0:
        return np.array([], dtype=object)
    # Each column factorized on its own (missing labels read as ""), then the combinations of codes.
    codes, values = [], []
    for labels in (op, top_op, annotation):
        c, u = factorized(np.asarray(labels, dtype=object))
        codes.append(np.where(c < 0, len(u), c).astype(np.int64))
        values.append([str(v) for v in u] + [""])
    link = np.zeros(n, dtype=np.int64) if linked is None else np.asarray(linked, dtype=bool).astype(np.int64)
    rows = np.stack(codes + [link], axis=1)
    if len(values[0]) * len(values[1]) * len(values[2]) < ONE_KEY_LIMIT:  # one int64 per combination
        key = ((rows[:, 0] * len(values[1]) + rows[:, 1]) * len(values[2]) + rows[:, 2]) * 2 + rows[:, 3]
        _, first, of_event = np.unique(key, return_index=True, return_inverse=True)
    else:
        _, first, of_event = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    phases = np.array(
        [event_phase(values[0][a], values[1][b], values[2][c], linked=bool(d)) for a, b, c, d in rows[first].tolist()],
        dtype=object,
    )
    return phases[of_event.reshape(-1)]
