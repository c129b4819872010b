"""Phases: the vectorised `event_phases` gives each event what `event_phase` gives its labels."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from headroom.trace import phases

# Names that hit each rule of phases.toml, names that hit none, and missing labels.
LABELS = st.sampled_from(
    [
        "aten::mm",
        "AddmmBackward0",
        "autograd::engine::evaluate_function: MmBackward0",
        "Optimizer.step#SGD.step",
        "optimizer",
        "headroom/forward",
        "",
        None,
        math.nan,
    ]
)


def _one_by_one(op, top, ann, linked):
    text = [
        [("" if v is None or (isinstance(v, float) and math.isnan(v)) else v) for v in col] for col in (op, top, ann)
    ]
    return [phases.event_phase(o, t, a, linked=bool(b)) for o, t, a, b in zip(*text, linked)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(LABELS, LABELS, LABELS, st.booleans()), min_size=1, max_size=40), st.booleans())
def test_event_phases_equals_event_phase_per_event(rows, wide):
    op, top, ann, linked = (np.array(c, dtype=object) for c in zip(*rows))
    linked = linked.astype(bool)
    expected = _one_by_one(op, top, ann, linked)
    limit = phases.ONE_KEY_LIMIT
    try:
        if wide:  # the combinations compared as rows of codes, as for labels too many to number
            phases.ONE_KEY_LIMIT = 0
        got = phases.event_phases(op, top, ann, linked).tolist()
    finally:
        phases.ONE_KEY_LIMIT = limit
    assert got == expected


def test_the_rules_decide_as_phases_toml_says():
    got = phases.event_phases(
        np.array(["aten::mm", "aten::mm", "aten::mm", "MmBackward0"], dtype=object),
        np.array(["aten::linear", "Optimizer.step#SGD.step", "x", "x"], dtype=object),
        np.array(["", "", "", ""], dtype=object),
        np.array([False, False, True, False]),
    )
    assert got.tolist() == ["forward", "optimizer", "backward", "backward"]


def test_no_events_no_phases():
    assert (
        phases.event_phases(np.array([], dtype=object), np.array([], dtype=object), np.array([], dtype=object)).tolist()
        == []
    )
