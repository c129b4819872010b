"""The committed a-priori results (docs/gpu/apriori/): verify's speedup on an extracted problem projected
onto the base trace, with no variant run, against validate's measurement of the same substitution on
the H200 (scripts/gpu_validate.py). Every projection is recomputed here with the code at hand; the
table in docs/validation.md is what they give."""

from __future__ import annotations

import json
import statistics
import math
from pathlib import Path

import pytest

from headroom.report.apriori import apriori_rows, apriori_table

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "docs" / "gpu" / "apriori"
DOC = REPO / "docs" / "validation.md"


@pytest.fixture(scope="module")
def rows():
    return {r.name: r for r in apriori_rows(RUNS)}


def test_the_table_in_the_docs_is_what_the_committed_runs_give(rows):
    assert apriori_table(list(rows.values())) in DOC.read_text(), \
        "docs/validation.md: regenerate with python -m headroom.report.apriori docs/gpu/apriori"


def test_the_set_covers_sync_slower_training_and_launch_bound(rows):
    assert len(rows) >= 8 and len({n.split("-")[0] for n in rows}) >= 4
    assert any(r.launch_bound for r in rows.values()) and "dlrm-train-interaction" in rows
    assert any(r.syncs for r in rows.values()) and any(r.verify_speedup < 1 for r in rows.values())


def test_these_rows_meet_the_targets(rows):
    for name in ("llama7b-prefill-rmsnorm", "llama7b-decode-bs1-rmsnorm", "bert-layernorm",
                 "gpt2xl-decode-bs1-gelu", "dlrm-train-interaction", "llama7b-prefill-rmsnorm-checked"):
        r = rows[name]
        assert abs(r.error) <= r.target, f"{name}: {100 * r.error:+.2f}%"
        assert r.low <= r.measured <= r.high, name


def test_training_backward_kernels_keep_their_launches(rows):
    # The candidate's call (forward + backward, 1.5 ms of CPU measured by verify) replaces the forward's
    # call only; the 17 backward kernels per step, launched on autograd's thread outside every module
    # range, keep their launches. Charging each of them the call cost projected 1.118x for 1.433x.
    r = rows["dlrm-train-interaction"]
    assert abs(r.error) < 0.01


def test_a_synchronising_candidate_projects_its_kernel_ratio_and_its_syncs(rows):
    r = rows["llama7b-prefill-rmsnorm-checked"]
    assert r.candidate_clock == "plain" and r.syncs == 1.0
    assert r.factor == pytest.approx(r.kernel_ratio) and r.factor == pytest.approx(r.part_speedup, rel=0.01)
    assert r.verify_speedup < r.factor  # the serialised clock counts the wait too
    # It loses part of what its kernels gain: the sync drains the GPU's queue each call.
    plain = rows["llama7b-prefill-rmsnorm"]
    assert r.measured < r.estimate < plain.estimate and r.measured < plain.measured


def test_a_slower_candidate_is_projected_slower(rows):
    r = rows["llama7b-prefill-rmsnorm-fp64"]
    assert r.verify_speedup < 1 and r.estimate < 1 and r.measured < 1 and r.high < 1


def test_verify_agrees_with_the_part_inside_the_model_within_these_ratios(rows):
    # verify / in-model speedup of the replaced part: 0.85-1.02 (the memory-bound norms run faster alone).
    ratios = {n: r.verify_vs_part for n, r in rows.items() if r.candidate_clock == "gated"}
    assert all(0.84 <= v <= 1.02 for v in ratios.values()), ratios
    assert sum(abs(v - 1) <= 0.10 for v in ratios.values()) == 4


def _kernelbench(name: str) -> list[dict]:
    import gzip
    return json.loads(gzip.decompress((REPO / "docs" / "gpu" / "measure" / name).read_bytes()))["results"]


# The device calls of KernelBench level 1 on the H200, in the order they ran (docs/verify.md, "On the H200").
KB_CALLS = ("a", "b", "c", "d", "e", "f")


def kernelbench_latest() -> tuple[dict, dict]:
    """Per problem, the reference-as-candidate result of the latest call that measured it, and that call."""
    latest, source = {}, {}
    for call in KB_CALLS:
        for r in _kernelbench(f"kernelbench_l1.{call}.json.gz"):
            if r["kind"] == "reference":
                latest[r["problem"]], source[r["problem"]] = r, call
    return latest, source


def test_kernelbench_identical_kernels_on_the_gated_clock():
    """The reference as its own candidate, all 100 level-1 problems, each from the latest call that ran it."""
    latest, source = kernelbench_latest()
    rs = list(latest.values())
    passed = [r for r in rs if r["verdict"] == "pass"]
    inside = [r for r in passed if 0.97 <= r["speedup_ci"][0] and r["speedup_ci"][1] <= 1.03]
    far = [r["problem"] for r in passed if r["speedup_ci"][0] > 1.02 or r["speedup_ci"][1] < 0.98]
    assert (len(rs), len(passed), len(inside)) == (100, 100, 98)
    assert far == [] and [r["verdict"] for r in rs if r["verdict"] == "fail"] == []
    assert sorted(int(r["problem"].split("_")[0]) for r in passed if r not in inside) == [13, 56]
    by_call = {c: sorted(int(p.split("_")[0]) for p, s in source.items() if s == c) for c in KB_CALLS}
    assert by_call["d"] == [1, 97] and by_call["e"] == [23, 45, 70, 90] and by_call["f"] == [19, 40, 68]
    assert [len(by_call[c]) for c in KB_CALLS] == [25, 12, 54, 2, 4, 3]
    text = (REPO / "docs" / "verify.md").read_text()
    for c in ("d", "e", "f"):  # the docs list the problems each of the short calls contributes
        assert ", ".join(map(str, by_call[c])) in text, c
    assert statistics.median(r["elapsed_s"] for r in rs) <= 60


def test_kernelbench_the_earlier_calls_failed_where_the_harness_was_short():
    """45 (out of memory in the harness) and 90 (a NaN relative L2 error) in the calls before the last."""
    c = {r["problem"]: r for r in _kernelbench("kernelbench_l1.c.json.gz") if r["kind"] == "reference"}
    assert c["45_Average_Pooling_2D"]["verdict"] == "error" and c["90_cumprod"]["verdict"] == "fail"
    assert c["68_conv_transposed_3D__square_input__asymmetric_kernel"]["speedup_ci"][1] < 0.96


def test_kernelbench_attacks_on_the_gpu_fail_and_honest_candidates_pass():
    """KernelBench's adversarial kernels, the zeros/partial-write/shape-cache candidates and our cheats on the H200."""
    rs = _kernelbench("kernelbench_l1.d.json.gz")
    cheats = [r for r in rs if r["kind"] in ("adversarial", "zeros", "partial_write", "shape_cache", "cheat")]
    honest = [r for r in rs if r["kind"] in ("honest", "example")]
    assert len(cheats) == 36 and len(honest) == 11
    assert [r["problem"] for r in cheats if r["verdict"] not in ("fail", "error")] == []
    assert [r["verdict"] for r in cheats if r["verdict"] == "error"] == ["error"]
    assert all(r["verdict"] == "pass" for r in honest)
    by_name = {r["candidate"].rsplit("/", 1)[-1]: r for r in rs if r["kind"] == "adversarial"}
    assert {n: r["reason"].split(":")[0] for n, r in by_name.items()} == {
        "non_default_stream_kernel.py": "stream_ordering", "result_reuse_kernel.py": "finite",
        "zero_out_kernel.py": "no_input_mutation"}


def test_kernelbench_sealed_attacks_on_the_h200():
    """The sealed corpus on the H200 (kernelbench_l1.e: the GPU's default seal, the candidate with the
    harness's uid). Six results are what scripts/gpu_kernelbench.py expects; the other six were measured
    with attacks and a harness without what docs/verify.md ("Threat model") describes for them."""
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_kernelbench

    got = {Path(r["candidate"]).stem: r for r in _kernelbench("kernelbench_l1.e.json.gz") if r["group"] == "sealed"}
    expected = {n: e["same-uid"] for n, e in gpu_kernelbench.SEALED_EXPECTED.items()}
    assert set(got) == set(expected)
    other = {"attack_forkserver", "attack_reference_memory", "attack_trial_flags", "attack_trial_frame",
             "attack_trial_snapshot", "probe_reach"}
    assert {n: r["verdict"] for n, r in got.items() if n not in other} == {n: v for n, v in expected.items() if n not in other}
    # probe_reach reached the fork server (same uid) and hung up: the server stopped listening, and
    # the harness's request for the reference's child was refused
    reach = json.loads(got["probe_reach"]["report"])
    assert reach["connect_fork_server"] == "ok" and reach["uid"] == 0
    assert got["probe_reach"]["reason"] == "harness error: ConnectionRefusedError: [Errno 111] Connection refused"
    # CUDA's device files take the descriptor numbers the sealing freed; multiprocessing's record of the
    # resource tracker's number then names one of them, which the attack's multiprocessing closed
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"} <= set(reach["fds"].values())
    assert got["attack_forkserver"]["reason"].startswith("AcceleratorError: CUDA error: unknown error")
    assert got["attack_forkserver"]["reason"].endswith("(during init)")
    assert "can't convert cuda:0 device type tensor to numpy" in got["attack_reference_memory"]["reason"]
    # rounded to 10 mantissa bits, TF32's own precision: inside the gates, and slower
    for n in ("attack_trial_flags", "attack_trial_frame", "attack_trial_snapshot"):
        r = got[n]
        assert r["verdict"] == "pass" and r["speedup_ci"][1] < 0.7, n
        rel = next(c["detail"] for c in r["checks"] if c["name"] == "rel_l2")
        err, gate = _err_gate(rel)
        assert err < gate / 2, (n, rel)


def test_kernelbench_sealed_attacks_on_the_h200_are_what_each_seal_expects():
    """kernelbench_l1.f: the sealed corpus on the H200's default seal, every verdict the "same-uid" column,
    with the reasons the threat model gives; .f-cuda-uid: the uid drop on CUDA, where the harness cannot
    map the candidate's CUDA IPC outputs across uids."""
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_kernelbench

    f = _kernelbench("kernelbench_l1.f.json.gz")
    got = {Path(r["candidate"]).stem: r for r in f if r["group"] == "sealed"}
    assert {n: r["verdict"] for n, r in got.items()} == {n: e["same-uid"] for n, e in gpu_kernelbench.SEALED_EXPECTED.items()}
    assert all(r["as_expected"] and r["seal"] == "same-uid" for r in got.values())
    assert "fork server stopped serving while the candidate ran" in got["probe_reach"]["reason"]
    assert all("containment" in got[n]["reason"] for n in ("attack_forkserver", "attack_clone_parent", "attack_mount_proc"))
    assert "0 hit(s) in host memory" in got["attack_reference_memory"]["report"]
    frame = got["attack_trial_frame"]["reason"]
    assert frame.startswith("timed_outputs:") and "sampled relative L2 error 3.26e-03" in frame and "allowed 1.30e-03" in frame
    for n in ("attack_trial_flags", "attack_trial_snapshot"):
        err, gate = _err_gate(got[n]["reason"].split(";")[0])
        assert got[n]["reason"].startswith("rel_l2:") and err > 2.5 * gate, (n, err, gate)
    refs = [r for r in f if r["kind"] == "reference"]
    assert len(refs) == 3 and all(r["verdict"] == "pass" and 0.998 <= r["speedup_ci"][0] <= r["speedup_ci"][1] <= 1.003
                                  for r in refs)
    uid = {Path(r["candidate"]).stem: r for r in _kernelbench("kernelbench_l1.f-cuda-uid.json.gz")}
    refused = {n: r["reason"] for n, r in uid.items() if "during import" in (r["reason"] or "")}
    assert set(refused) == {"attack_forkserver", "attack_mount_proc"} and uid["attack_clone_parent"]["verdict"] == "fail"
    ipc = [n for n, r in uid.items() if "mapping of buffer object failed" in (r["reason"] or "")]
    assert len(ipc) == 9 and all(uid[n]["reason"].startswith("harness error: AcceleratorError") for n in ipc)


def _err_gate(detail: str) -> tuple[float, float]:
    """'<trial>: relative L2 error 3.58e-04 (gate 1.16e-03)' -> (3.58e-4, 1.16e-3)"""
    err = float(detail.split("relative L2 error ")[1].split()[0])
    return err, float(detail.split("(gate ")[1].rstrip(")"))


def test_kernelbench_early_harness_was_charged_its_own_input_writes():
    before = [r for r in _kernelbench("kernelbench_l1.before.json.gz") if r["verdict"] != "pass"]
    assert len(before) == 6 and all("calibrated time" in r["reason"] for r in before)
    text = (REPO / "docs" / "verify.md").read_text()
    assert "**100 of 100** `pass`" in text and "**98 of 100**" in text


def _result(name: str) -> dict:
    return json.loads((RUNS / name / "result.json").read_text())


def test_gpt2xl_prefill_misses_on_the_kernels_the_change_does_not_touch(rows):
    # verify's speedup is the model's (8.46x clock, 8.36x profiled kernels, 8.31x in the model) and
    # validate's own estimate from the variant trace misses by as much: the error is elsewhere.
    r, res = rows["gpt2xl-prefill-gelu"], _result("gpt2xl-prefill-gelu")
    assert r.kernel_ratio == pytest.approx(r.part_speedup, rel=0.01)
    assert res["error"]["estimate"] > 0.03 and r.error > 0.03
    d = res["detail"]
    untouched = [(d[f"part_{s}"]["total_us"] - d[f"part_{s}"]["us"]) / 1e3 for s in ("base", "variant")]
    assert untouched[0] == pytest.approx(51.58, abs=0.01) and untouched[1] == pytest.approx(53.45, abs=0.01)
    slower = untouched[1] / untouched[0] - 1     # 3.6%: inside gpu_drift.slower (4%), outside the estimate
    assert 0.035 < slower < 0.04
    base_ms = res["baseline"]["step_ms"]
    assert (base_ms / r.estimate + slower * untouched[0]) == pytest.approx(base_ms / r.measured, abs=0.4)


def test_the_fp64_candidate_ran_another_kernel_alone_than_in_the_model(rows):
    # verify.json measured with the candidate's float32 weight: 9 launches against the model's 8, 780 us
    # against 702 us per call; with the model's per-call time the estimate is inside the target.
    r, res = rows["llama7b-prefill-rmsnorm-fp64"], _result("llama7b-prefill-rmsnorm-fp64")
    v = json.loads((RUNS / r.name / "verify.json").read_text())["per_call"]
    model_cand = res["detail"]["part_variant"]["us"] / res["detail"]["calls_per_step"]
    if v["candidate"]["launches"] == 9:
        assert res["part"]["launches_per_call"] == [8.0, 8.0]
        assert v["candidate"]["kernel_us"] / model_cand == pytest.approx(1.111, abs=0.002)
        assert r.error < -0.03
    else:  # re-verified with the workload's bf16 weight
        assert v["candidate"]["launches"] == 8 and abs(r.error) <= r.target


def test_the_render_replaces_the_table_in_place(rows, tmp_path):
    from headroom.report.apriori import update_table

    table = apriori_table(list(rows.values()))
    text = DOC.read_text()
    assert update_table(text, table) == text
    stale = text.replace("| 0.9489x |", "| 0.9999x |", 1)
    assert stale != text and update_table(stale, table) == text
    head = table.split("\n", 1)[0]
    with pytest.raises(ValueError, match="found 0"):
        update_table("no table here", table)
    with pytest.raises(ValueError, match="found 2"):
        update_table(f"{head}\n\n{head}\n", table)
