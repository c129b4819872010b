"""Hardening, class "options accepted that should not be" (issue 46): every numeric option refuses NaN
and infinities (NaN passes every range check: `--fail-if-slower nan` disabled the CI gate) and values out
of its range; a `--speedup` with an option after its factor other than `launches` is refused, not made
into a selector that matches nothing.

Generated: a numeric option of a command and a value out of its range; `--speedup` texts with a stray
`,KEY=VALUE` or `=` in a name."""

from __future__ import annotations

from hardening_support import SMALL, one_error_line, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

BAD = st.sampled_from(["nan", "NaN", "inf", "-inf", "+Infinity", "-nan"])
# (the command before the option, the option, values out of its range besides NaN and the infinities)
OPTIONS = (
    (["diff", SMALL, SMALL], "--fail-if-slower", ["-1", "1e5", "1e300"]),
    (["project", SMALL, "-s", "category:embedding=2"], "--step-ms", ["0", "-3", "1e300", "3600001"]),
    (["project", SMALL], "--win-rate", ["1.5", "-0.1"]),
    (["project", SMALL, "--win-rate", "0.5"], "--median", ["0", "-2"]),
    (["project", SMALL, "--win-rate", "0.5", "--median", "2"], "--quantile", ["2", "-1"]),
    (["targets", SMALL], "--speedup", ["0", "-1"]),
    (["report", SMALL, "--html", "/nonexistent-dir/x.html"], "--target-speedup", ["0"]),
)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(OPTIONS).flatmap(lambda o: st.tuples(st.just(o), BAD | st.sampled_from(o[2]))))
def test_a_numeric_option_out_of_its_range_is_refused(case):
    (command, option, _), value = case
    code, out, err = run(*command, f"{option}={value}")
    assert code == 2 and one_error_line(err), (option, value, err)


KEY = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(lambda k: k.lower() != "launches")


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    selector=st.sampled_from(["op:aten::mm", "category:embedding", "kernel:^k", "module:Foo"]),
    key=KEY,
    value=st.sampled_from(["1", "x", "2.5", ""]),
)
def test_a_speedup_with_an_unknown_option_is_refused(selector, key, value):
    code, _, err = run("project", SMALL, "-s", f"{selector}=2,{key}={value}")
    assert code == 2 and one_error_line(err), err


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(["op", "category", "problem"]), junk=st.sampled_from(["=2", ",x", "=1,y"]))
def test_a_name_with_an_equals_sign_is_no_selector(field, junk):
    code, _, err = run("project", SMALL, "-s", f"{field}:aten::mm{junk}=2")
    assert code == 2 and one_error_line(err), err
