"""Hardening, classes "events the trace's own structure contradicts" and "step bookkeeping" (issue 46).

A GPU activity is checked against its device (the trace's deviceProperties), its launch (it starts after
the call that launched it), its stream (a stream starts work in launch order) and the end of the trace (after
the CPU's last event the GPU only drains what was launched); a ProfilerStep against its neighbours (a number
that counts up, within 2^53, used once; a duration above 0). What contradicts them refuses the trace, or with
--lenient is dropped and counted in one warning.

Generated: one kernel of a real trace moved later (far, or past the work its stream launched after it) or
earlier than its launch, or copied onto a device the trace does not have; one step given a duration of 0, a
number beyond 2^53 or no number, the number of an earlier step, or a number below the one before it."""

from __future__ import annotations

from functools import cache

import pytest
from hardening_support import SMALL, document, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headroom.trace.analysis import analyze
from headroom.trace.load import TraceError

FAST = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))


@cache
def _baseline():
    return analyze(SMALL, use_cache=False)


def _kernels(doc):
    launches = {
        e["args"]["correlation"]: e["ts"]
        for e in doc["traceEvents"]
        if isinstance(e, dict) and e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    ks = [
        e
        for e in doc["traceEvents"]
        if isinstance(e, dict) and e.get("cat") == "kernel" and e["args"].get("correlation") in launches
    ]
    return sorted(ks, key=lambda e: launches[e["args"]["correlation"]]), launches


@st.composite
def misplaced_kernels(draw):
    doc = document()
    ks, launches = _kernels(doc)
    i = draw(st.integers(min_value=0, max_value=len(ks) - 2))
    k = ks[i]
    how = draw(st.sampled_from(["far", "past_next", "before_launch", "device"]))
    if how == "far":
        k["ts"] += draw(st.floats(min_value=1e6, max_value=1e10))
    elif how == "past_next":
        nxt = ks[i + 1]
        k["ts"] = nxt["ts"] + nxt["dur"] + draw(st.floats(min_value=2.0, max_value=5e3))
    elif how == "before_launch":
        k["ts"] = launches[k["args"]["correlation"]] - draw(st.floats(min_value=51.0, max_value=1e5))
    else:
        copy = dict(k, args=dict(k["args"], device=draw(st.integers(min_value=1, max_value=2**31))))
        copy["dur"] = draw(st.floats(min_value=1.0, max_value=100.0))
        doc["traceEvents"].append(copy)
    return how, doc


@FAST
@given(case=misplaced_kernels())
def test_a_kernel_its_structure_contradicts_is_refused_or_dropped_and_counted(tmp_path_factory, case):
    how, doc = case
    path = write(doc, tmp_path_factory.mktemp("k") / "t.json")
    with pytest.raises(TraceError, match=r"event \d+ \(kernel .*\): (ts|device) .* \(--lenient drops such events\)"):
        analyze(path, use_cache=False)
    a = analyze(path, lenient=True, use_cache=False)
    assert any(w.startswith("dropped 1 GPU activity") for w in a.warnings), a.warnings
    base = _baseline()
    assert a.n_devices == base.n_devices
    assert a.step_us <= base.step_us * 1.01 + 1.0  # never a step of 335 ms, nor idle on a second device


@st.composite
def misnumbered_steps(draw):
    doc = document()
    steps = sorted(
        (e for e in doc["traceEvents"] if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    how = draw(st.sampled_from(["zero", "huge", "text", "reused", "down"]))
    if how == "zero":
        draw(st.sampled_from(steps))["dur"] = 0
    elif how == "huge":
        draw(st.sampled_from(steps))["name"] = f"ProfilerStep#{draw(st.integers(min_value=2**53 + 1))}"
    elif how == "text":
        draw(st.sampled_from(steps))["name"] = "ProfilerStep#" + draw(st.sampled_from(["", "x", "-1", "1.5", "٣"]))
    else:
        i = draw(st.integers(min_value=1, max_value=len(steps) - 1))
        first = int(steps[0]["name"].split("#")[1])
        n = (
            int(steps[i - 1]["name"].split("#")[1])
            if how == "reused"
            else draw(st.integers(min_value=0, max_value=first))
        )
        steps[i]["name"] = f"ProfilerStep#{n}"
    return how, doc


@FAST
@given(case=misnumbered_steps())
def test_a_step_its_neighbours_contradict_is_refused_or_dropped_and_counted(tmp_path_factory, case):
    how, doc = case
    path = write(doc, tmp_path_factory.mktemp("s") / "t.json")
    with pytest.raises(
        TraceError,
        match=r"event \d+ \(user_annotation 'ProfilerStep#.*'\): (name|dur) .* "
        r"\(--lenient drops such events\)",
    ):
        analyze(path, use_cache=False)
    a = analyze(path, lenient=True, use_cache=False)
    assert any(w.startswith("dropped 1 GPU activity/steps") for w in a.warnings), a.warnings
    numbers = a.steps["step"].tolist()
    assert numbers == sorted(set(numbers)) and all(0 <= n <= 2**53 for n in numbers)
    assert a.num_steps == 2 and (a.steps["wall_us"] > 0).all()
    assert not any("0.000 ms" in n for n in a.notes)
