"""Hardening, class "numbers against the wrong reference" (issue 46): a time window or the whole trace is
never compared with the manifest's unprofiled time of one ProfilerStep; the note says so once.

Generated: a shipped trace with a manifest step time, and an analysed span other than its steps (the whole
trace, or a --window regex built from one of its own CPU range names)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headroom.projection.project import project
from headroom.projection.speedups import parse_cli_speedup
from headroom.trace.analysis import analyze
from headroom.trace.load import load_trace

TRACES = Path(__file__).resolve().parent.parent / "traces"
STEPS_BASIS = "ProfilerStep ranges"
SMALL = ("dlrm-int8.infer.json.gz", "dlrm.train.json.gz", "bert-base.infer.json.gz")


@cache
def _trace(name: str):
    return load_trace(TRACES / name, use_cache=False)


@cache
def _names(name: str) -> list[str]:
    cpu = _trace(name).cpu
    names = sorted({str(n) for n in cpu["name"].astype(str).unique() if str(n).strip()})
    return names[:400]


@st.composite
def spans(draw):
    name = draw(st.sampled_from(SMALL))
    if draw(st.booleans()):
        return name, True, None
    ranges = _names(name)
    picked = draw(st.sampled_from(ranges))
    return name, False, re.escape(picked)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(spans())
def test_a_span_other_than_the_steps_is_not_compared_with_a_step_time(case):
    name, whole, window = case
    trace = _trace(name)
    steps = analyze(trace, use_cache=False)
    assert steps.basis == STEPS_BASIS and steps.unprofiled_step_us is not None  # the manifest records one
    a = analyze(trace, whole_trace=whole, window=window, use_cache=False)
    assert a.basis != STEPS_BASIS
    assert a.unprofiled_step_us is None and a.unprofiled_idle_fraction is None
    assert "unprofiled" not in a.to_dict()
    said = [n for n in a.notes if "without the profiler" in n]
    assert len(said) == 1 and "not compared" in said[0]
    res = project(a, [parse_cli_speedup("category:addressable=2")], methods=("amdahl",))
    assert res.unprofiled is None
    assert res.estimate is None or res.estimate.clock == "profiled"
    assert not any("profiler" in w and "slower" in w for w in res.warnings)
