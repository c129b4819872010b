"""The cheating corpus: every cheat is caught, honest candidates pass (CPU, small problems).

Each problem's reference is prepared once per module; every candidate runs in its own child
process, as in production. Attacks on the harness itself are in test_verify_attacks.py.
"""

from __future__ import annotations

import json

import pytest
from verify_support import (
    CHEATERS,
    assert_caught,
    assert_honest,
    assert_value_cheat_fails,
    one_harness_thread,  # noqa: F401  (autouse fixture)
)

from headroom.jsonio import plain
from headroom.verify import VerifyOptions, prepare_reference, verify_candidate

PROBLEMS = CHEATERS / "problems"
CANDIDATES = CHEATERS / "candidates"

# Memory never written reads as NaN where the allocator handed back a block the harness poisoned (an
# output it had read), else as zeros or stale values: finite, or the value checks.
# A stale block can also hold the right values during a correctness trial and the wrong ones while timed: then
# timed_outputs is the check that fails (verify_support.VALUE_CHECKS).
UNWRITTEN = ("finite", "rel_l2", "timed_outputs")
CACHED = ("finite", "rel_l2", "timed_outputs")  # a cached output was poisoned once the harness had read it

# candidate -> (problem, expected verdict, a check that must fail (or one of several) / a phrase the reason
# must contain)
CASES = {
    "honest_reimplementation": ("gelu_linear", "honest", None),
    "cheat_zeros": ("gelu_linear", "fail", "rel_l2"),
    "cheat_partial_write": ("gelu_linear", "fail", UNWRITTEN),
    "cheat_empty_unwritten": ("gelu_linear", "fail", UNWRITTEN),
    "cheat_stale_memory": ("gelu_linear", "fail", UNWRITTEN),
    "cheat_input_mutation": (
        "gelu_linear",
        "error",
        "SIGSEGV",
    ),  # the ring is read-only in the child (GPU: no_input_mutation)
    "cheat_cache_data_ptr": ("gelu_linear", "fail", CACHED),
    "cheat_cache_shape": ("gelu_linear", "fail", "rel_l2"),
    "cheat_side_stream": ("gelu_linear", "fail", UNWRITTEN),
    "cheat_bf16": ("gelu_linear", "fail", "rel_l2"),
    "cheat_timer_patch": ("gelu_linear", "fail", "integrity"),
    "cheat_patch_allclose": ("gelu_linear", "fail", "integrity"),
    "cheat_lazy_subclass": ("gelu_linear", "fail", "output_type"),
    "cheat_fast_when_timed": ("gelu_linear", "fail", "timed_outputs"),
    "cheat_crash": ("gelu_linear", "error", "SIGSEGV"),
    "cheat_sys_exit": ("gelu_linear", "error", "sys.exit"),
    "cheat_cuda_error": ("gelu_linear", "error", "CUDA error"),
    "cheat_constant_mean": ("large_mean", "fail", "centred"),
    "honest_large_mean": ("large_mean", "honest", None),
    "cheat_published_distribution": ("clamp_unit", "fail", "rel_l2"),
    "honest_clamp": ("clamp_unit", "honest", None),
    "honest_argmax": ("argmax_rows", "honest", None),
    "cheat_argmax_bf16": ("argmax_rows", "fail", "exact"),
}


@pytest.fixture(scope="module")
def references():
    refs: dict = {}

    def get(name: str):
        if name not in refs:
            refs[name] = prepare_reference(PROBLEMS / f"{name}.py", VerifyOptions.quick())
            assert refs[name].error is None, refs[name].error
        return refs[name]

    yield get
    for r in refs.values():
        r.close()


def _verify(references, candidate: str, problem: str, **overrides):
    ref = references(problem)
    saved = ref.options
    ref.options = VerifyOptions.quick(**overrides)
    try:
        return verify_candidate(PROBLEMS / f"{problem}.py", CANDIDATES / f"{candidate}.py", reference=ref)
    finally:
        ref.options = saved


@pytest.mark.parametrize("candidate", sorted(CASES))
def test_candidate_verdict(references, candidate):
    problem, verdict, evidence = CASES[candidate]
    r = _verify(references, candidate, problem)
    failed = {c.name for c in r.checks if not c.passed}
    if verdict == "honest":
        assert_honest(r)
        names = {c.name for c in r.checks}
        expected = {
            "sensitivity",
            "timed_outputs",
            "integrity",
            "no_input_mutation",
            "protocol",
            "containment",
            "timer_consistency",
        }
        expected |= {"exact"} if problem == "argmax_rows" else {"rel_l2", "allclose", "centred", "finite"}
        assert expected <= names, names
        assert 6 <= r.timing["rounds"] <= 8 and r.timing["iters_per_phase"] >= 1  # quick(): 6 to 8, adaptive
        assert r.timing["rounds_stop"] in ("tight", "max_rounds", "budget")
        assert r.launches_per_call["candidate"] >= 1 and r.launches_per_call["reference"] >= 1
        return
    if evidence in (UNWRITTEN, CACHED):  # stale memory: fail, or inconclusive on a machine too loaded to time
        assert_value_cheat_fails(r, candidate, stale=True)
        return
    assert_caught(r)
    assert r.verdict == verdict, (r.verdict, r.reason, [plain(c) for c in r.checks])
    if verdict == "fail":
        assert (set(evidence) & failed) if isinstance(evidence, tuple) else evidence in failed, (failed, r.reason)
    else:
        assert evidence in (r.reason or ""), r.reason


def test_constant_mean_is_caught_by_the_centred_check(references):
    r = _verify(references, "cheat_constant_mean", "large_mean")
    centred = next(c for c in r.checks if c.name == "centred")
    assert not centred.passed and "centred relative error" in centred.detail


def test_hang_is_killed_and_reported(references):
    r = _verify(references, "cheat_hang", "gelu_linear", timeout=6)
    assert r.verdict == "error" and "timed out after 6 s" in r.reason


@pytest.mark.slow  # torch.compile builds the candidate (a minute on 2 cores)
def test_torch_compile_of_the_reference_is_honest(references):
    r = _verify(references, "honest_compile", "gelu_linear", timeout=300)
    assert_honest(r)
    assert next(c for c in r.checks if c.name == "integrity").passed


def test_a_compiler_sized_artefact_is_not_refused(references):
    """RLIMIT_FSIZE bounds a runaway writer, not a compiler: 160 MB (torch's precompiled header is
    156 MB) passes; a 32 MB cap made an honest torch.compile candidate an error on a fresh machine."""
    assert_honest(_verify(references, "honest_large_artifact", "gelu_linear"))
    r = _verify(references, "honest_large_artifact", "gelu_linear", file_cap_bytes=32 << 20)
    assert r.verdict == "error" and "File too large" in r.reason, r.reason


def test_memory_hog_is_honest_and_measured(references):
    r = _verify(references, "honest_memory_hog", "gelu_linear")
    assert_honest(r)
    assert r.memory_ratio > 1.5 and r.memory["candidate_peak_bytes"] > r.memory["reference_peak_bytes"]
    if r.verdict == "pass":
        assert "memory" in {f.name for f in r.flags}


def test_result_json_contract(references):
    """The fields `headroom project --speedups` reads keep their names; the new ones are there."""
    r = _verify(references, "honest_reimplementation", "gelu_linear")
    d = json.loads(json.dumps(plain(r)))
    for key in (
        "problem",
        "candidate",
        "verdict",
        "speedup",
        "speedup_fp32",
        "speedup_compile",
        "memory_ratio",
        "checks",
        "flags",
        "review",
        "device",
        "baseline",
        "timing",
        "memory",
        "reason",
        "seed",
        "info",
        "elapsed_s",
        "speedup_ci",
        "launches_per_call",
    ):
        assert key in d, key
    assert d["problem"] == "gelu_linear" and d["verdict"] in ("pass", "inconclusive")
    assert d["baseline"]["tf32"] is True and d["baseline"]["fp32"]["allow_tf32_matmul"] is False
    assert all(set(c) == {"name", "passed", "detail"} for c in d["checks"])
    t = d["timing"]
    assert t["method"] == "harness_clock" and t["clock"] == "plain"  # a CPU has no gated clock
    assert t["reference_tf32"]["n"] == t["rounds"] == len(t["candidate_per_round"]) and 6 <= t["rounds"] <= 8
    assert t["ci_method"].startswith("median of per-round ratios")
    assert 0 < t["overhead_ms"] == pytest.approx(t["null_min_ms"] + t["read_min_ms"])
    pc = d["per_call"]
    assert pc["reference"]["launches"] == d["launches_per_call"]["reference"]
    assert pc["candidate"]["launches"] == d["launches_per_call"]["candidate"] and pc["candidate"]["call_us"] is None
    assert d["info"]["kernelbench_allclose"] is True and len(d["info"]["trials"]) == 7
    assert d["info"]["truth_precision"] == "float64"
    assert d["launches_per_call"]["method"].startswith("aten ops")
    assert set(d["info"]["seeds"]) >= {"plan", "trial0.values", "trial6.base"}  # published after the run
