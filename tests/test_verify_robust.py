"""The harness on outputs that strain it (CPU, small problems): float32 overflow, non-contiguous outputs,
a memory budget smaller than the timing would like, and the kernels each child ran.

The generic KernelBench candidates (tests/cheaters/kernelbench/) wrap the problem named in
``HEADROOM_TEST_PROBLEM``: the reference itself, zeros, noise, a partial write.
"""

from __future__ import annotations

from verify_support import (
    CHEATERS,
    assert_caught,
    assert_honest,
    assert_value_cheat_fails,
    one_harness_thread,  # noqa: F401  (autouse fixture)
)

from headroom.verify import VerifyOptions, launches, prepare_reference, verify_candidate
from headroom.verify import calibrate as ss
from headroom.verify.reference import job_for

PROBLEMS = CHEATERS / "problems"
GENERIC = CHEATERS / "kernelbench"


def _run(problem: str, candidates: list[str], **kw) -> tuple[dict, object]:
    path = PROBLEMS / f"{problem}.py"
    ref = prepare_reference(path, VerifyOptions.quick(env={"HEADROOM_TEST_PROBLEM": str(path.resolve())}, **kw))
    assert ref.error is None, ref.error
    try:
        out = {c: verify_candidate(path, GENERIC / f"{c}.py", reference=ref) for c in candidates}
        ring = ref.ring.nbytes if ref.ring is not None else 0
    finally:
        ref.close()
    return out, ring


def _failed(r) -> set[str]:
    return {c.name for c in r.checks if not c.passed}


def test_cumprod_beyond_float32_passes_the_reference_and_fails_zeros_and_noise():
    rs, _ = _run("cumprod_overflow", ["reference", "zeros", "noise"])
    assert_honest(rs["reference"])
    gates = rs["reference"].info["gates"]
    assert all(g["rel_l2"] == 2e-5 for trial in gates for g in trial)  # no gate loosened by the overflow
    for cheat in ("zeros", "noise"):
        r = rs[cheat]
        assert_caught(r)
        assert r.verdict == "fail" and "finite" in _failed(r), (cheat, r.reason)
        assert "where the truth is inf or NaN" in r.reason, r.reason


def test_a_non_contiguous_output_is_read_and_a_partial_write_of_it_fails():
    rs, _ = _run("transposed_output", ["reference", "partial_write"])
    assert_honest(rs["reference"])
    r = rs["partial_write"]
    assert_value_cheat_fails(r, stale=True)
    assert "view size" not in (r.reason or "")


def test_the_timing_ring_shrinks_to_the_memory_budget(monkeypatch):
    per_set = 1024 * 1024 * 4  # wide_rows: one float32 1024 x 1024 input; outputs 4 KiB
    out_bytes = 1024 * 4
    budget = int(6.5 * per_set)
    monkeypatch.setattr(ss, "_memory_budget", lambda ref: budget)
    rs, ring = _run("wide_rows", ["reference"])
    r = rs["reference"]
    assert not _failed(r), r.reason
    cal = r.timing["calibration"]
    # ring (with its slack), the harness's copy of each set, the set being drawn: 2 sets fit, 3 would not
    assert cal["memory_limit_iters"] == 2 and r.timing["iters_per_phase"] <= 2
    assert ss.timing_bytes(2, per_set, out_bytes, False) <= budget < ss.timing_bytes(3, per_set, out_bytes, False)
    assert cal["memory_bytes_at_iters"] <= cal["memory_budget_bytes"] == budget
    assert ring + r.timing["iters_per_phase"] * per_set + per_set <= budget


def test_too_little_memory_times_one_input_set_rather_than_none():
    per_set = 16 << 30  # 45_Average_Pooling_2D on an H200: 16 GiB of inputs, 135 MiB of outputs
    assert ss.memory_iters(int(0.4 * 110e9), per_set, 141705216, gated=True) == 1
    assert ss.memory_iters(0, per_set, 141705216, gated=True) == 1
    assert ss.memory_iters(10 * ss.timing_bytes(1, 1000, 10, True), 1000, 10, True) >= 9
    # per forward: the ring holds 1.25x, plus the harness's copy and, gated, the staged copy, plus 2 outputs
    assert ss.timing_bytes(2, 1000, 10, True) - ss.timing_bytes(1, 1000, 10, True) == 1250 + 1000 + 1000 + 20


def test_both_children_report_the_kernels_they_ran_and_start_alike():
    rs, _ = _run("cumprod_overflow", ["reference"])
    pc = rs["reference"].per_call
    cand = [k["name"] for k in pc["candidate"]["top_kernels"]]
    child = [k["name"] for k in pc["reference"]["child"]["top_kernels"]]
    harness = [k["name"] for k in pc["reference"]["top_kernels"]]
    assert set(cand) == set(child) == set(harness) == {"aten.mul.Tensor", "aten.cumprod.default"}
    assert all(k["calls"] == 1.0 and k["us"] is None for k in pc["candidate"]["top_kernels"])  # CPU: op counts
    path = PROBLEMS / "cumprod_overflow.py"
    ref = prepare_reference(path, VerifyOptions.quick(env={"HEADROOM_TEST_PROBLEM": str(path)}))
    try:
        a = job_for(ref, "reference", "r.log")
        b = job_for(ref, "candidate", "c.log", str(GENERIC / "reference.py"), {})
        assert a.env == b.env and a.threads == b.threads and a.init_seed == b.init_seed
    finally:
        ref.close()


def test_top_kernels_sum_each_name_per_forward():
    ev = [
        {"cat": "kernel", "name": "conv", "dur": 30.0},
        {"cat": "kernel", "name": "conv", "dur": 33.0},
        {"cat": "kernel", "name": "nchwToNhwc", "dur": 2.0},
        {"cat": "kernel", "name": "nhwcToNchw", "dur": 4.0},
        {"cat": "kernel", "name": "tiny", "dur": 1.0},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 99.0},
    ]
    assert launches.top_kernels(ev, 3) == (
        ("conv", 21.0, 2 / 3),
        ("nhwcToNchw", 4 / 3, 1 / 3),
        ("nchwToNhwc", 2 / 3, 1 / 3),
    )
