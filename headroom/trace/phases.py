"""The phase of a step an event ran in (forward, backward, optimizer), from headroom/data/phases.toml."""

from __future__ import annotations

import re
from functools import lru_cache

from headroom.datafiles import shipped


@lru_cache(maxsize=1)
def _rules() -> tuple[str, tuple[tuple[str, re.Pattern], ...]]:
    doc = shipped("phases.toml")
    rules = tuple((p["name"], re.compile(p["pattern"], re.IGNORECASE)) for p in doc["phase"])
    assert {doc["default"], *(n for n, _ in rules)} <= set(doc["phases"]), "phases.toml names an unknown phase"
    return doc["default"], rules


def phase_names() -> tuple[str, ...]:
    """Every phase, in the order a training step runs them: forward, backward, optimizer."""
    return tuple(shipped("phases.toml")["phases"])


def event_phase(*labels: str) -> str:
    """The phase of an event launched under these ops / ranges: the first rule one of them matches."""
    default, rules = _rules()
    for name, rx in rules:
        if any(rx.search(x) for x in labels if x):
            return name
    return default
