"""The cheating corpus: every cheat is caught, honest candidates pass (CPU, small problems).

Each problem's reference (truth, timings) is prepared once per module; every
candidate runs in its own child process, as in production.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headroom.verify import VerifyOptions, prepare_reference, verify_candidate

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE / "cheaters" / "problems"
CANDIDATES = HERE / "cheaters" / "candidates"

OPTIONS = dict(device="cpu", threads=1, timeout=90, iters=3, warmup=1)

# candidate -> (problem, expected verdict, a check that must fail / a phrase the reason must contain)
CASES = {
    "honest_reimplementation": ("gelu_linear", "pass", None),
    "cheat_zeros": ("gelu_linear", "fail", "rel_l2"),
    "cheat_partial_write": ("gelu_linear", "fail", "finite"),
    "cheat_empty_unwritten": ("gelu_linear", "fail", "finite"),
    "cheat_stale_memory": ("gelu_linear", "fail", "finite"),
    "cheat_input_mutation": ("gelu_linear", "fail", "no_input_mutation"),
    "cheat_cache_data_ptr": ("gelu_linear", "fail", "rel_l2"),
    "cheat_cache_shape": ("gelu_linear", "fail", "sensitivity"),
    "cheat_side_stream": ("gelu_linear", "fail", "finite"),
    "cheat_bf16": ("gelu_linear", "fail", "rel_l2"),
    "cheat_timer_patch": ("gelu_linear", "fail", "integrity"),
    "cheat_patch_allclose": ("gelu_linear", "fail", "integrity"),
    "cheat_lazy_subclass": ("gelu_linear", "fail", "output_type"),
    "cheat_fast_when_timed": ("gelu_linear", "fail", "timed_outputs"),
    "cheat_crash": ("gelu_linear", "error", "SIGSEGV"),
    "cheat_sys_exit": ("gelu_linear", "error", "sys.exit"),
    "cheat_cuda_error": ("gelu_linear", "error", "CUDA error"),
    "cheat_constant_mean": ("large_mean", "fail", "centred"),
    "honest_large_mean": ("large_mean", "pass", None),
    "cheat_published_distribution": ("clamp_unit", "fail", "rel_l2"),
    "honest_clamp": ("clamp_unit", "pass", None),
    "honest_argmax": ("argmax_rows", "pass", None),
    "cheat_argmax_bf16": ("argmax_rows", "fail", "exact"),
}


@pytest.fixture(scope="module")
def references():
    refs: dict = {}

    def get(name: str):
        if name not in refs:
            refs[name] = prepare_reference(PROBLEMS / f"{name}.py", VerifyOptions(**OPTIONS))
            assert refs[name].error is None, refs[name].error
        return refs[name]

    return get


def _verify(references, candidate: str, problem: str, **overrides):
    ref = references(problem)
    ref.options = VerifyOptions(**{**OPTIONS, **overrides})
    try:
        return verify_candidate(PROBLEMS / f"{problem}.py", CANDIDATES / f"{candidate}.py", reference=ref)
    finally:
        ref.options = VerifyOptions(**OPTIONS)


@pytest.mark.parametrize("candidate", sorted(CASES))
def test_candidate_verdict(references, candidate):
    problem, verdict, evidence = CASES[candidate]
    r = _verify(references, candidate, problem)
    failed = {c.name for c in r.checks if not c.passed}
    assert r.verdict == verdict, (r.reason, [c.to_dict() for c in r.checks])
    if verdict == "pass":
        assert not failed
        assert r.speedup is not None and r.speedup > 0 and r.speedup_fp32 is not None
        assert r.memory_ratio is not None
        expected = {"sensitivity", "timed_outputs", "integrity", "no_input_mutation", "same_inputs"}
        expected |= {"exact"} if problem == "argmax_rows" else {"rel_l2", "allclose", "centred", "finite"}
        assert expected <= {c.name for c in r.checks}
    elif verdict == "fail":
        assert evidence in failed, failed
        assert r.speedup is None
    else:
        assert evidence in (r.reason or ""), r.reason
        assert r.speedup is None


def test_constant_mean_passes_rel_l2_somewhere_but_not_centred(references):
    """The large-mean case: the centred check is what catches a constant, on every trial."""
    r = _verify(references, "cheat_constant_mean", "large_mean")
    centred = next(c for c in r.checks if c.name == "centred")
    assert not centred.passed and "centred relative error" in centred.detail


def test_hang_is_killed_and_reported(references):
    r = _verify(references, "cheat_hang", "gelu_linear", timeout=6)
    assert r.verdict == "error" and "timed out after 6 s" in r.reason


def test_torch_compile_of_the_reference_passes(references):
    r = _verify(references, "honest_compile", "gelu_linear", timeout=240)
    assert r.verdict == "pass", r.reason
    assert not [c for c in r.checks if c.name == "integrity" and not c.passed]


def test_memory_hog_passes_but_is_flagged(references):
    r = _verify(references, "honest_memory_hog", "gelu_linear")
    assert r.verdict == "pass", r.reason
    assert r.memory_ratio > 1.5
    assert "memory" in {f.name for f in r.flags}


def test_result_json_contract(references):
    r = _verify(references, "honest_reimplementation", "gelu_linear")
    d = json.loads(json.dumps(r.to_dict()))
    for key in ("problem", "verdict", "speedup", "speedup_fp32", "speedup_compile", "memory_ratio", "checks",
                "device", "baseline", "timing", "reason"):
        assert key in d
    assert d["problem"] == "gelu_linear" and d["verdict"] == "pass"
    assert d["baseline"]["tf32"] is True
    assert d["baseline"]["allow_tf32_matmul"] is True and d["baseline"]["fp32"]["allow_tf32_matmul"] is False
    assert all(set(c) == {"name", "passed", "detail"} for c in d["checks"])
    t = d["timing"]
    assert t["reference_tf32"]["n"] == 3 and t["candidate"]["median"] > 0 and "p25" in t["candidate"]
    assert d["info"]["kernelbench_allclose"] is True
    assert len(d["info"]["trials"]) == 7
