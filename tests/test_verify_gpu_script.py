"""lab/gpu/gpu_kernelbench.py (the H200 run) in its CPU dry-run mode: every group runs, results and the
wall time are written, each result says whether it is as expected, and the docs table renders."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from verify_support import REPO, kernelbench_dir

sys.path.insert(0, str(REPO / "lab" / "gpu"))
import gpu_kernelbench  # noqa: E402


@pytest.mark.slow  # a lab script's whole dry run: `make test-slow` (lab code, not the product)
def test_dry_run_writes_every_group_and_renders(tmp_path):
    kb = kernelbench_dir()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rc = gpu_kernelbench.main(
            ["--out", str(tmp_path), "--dry-run", "--only", "19", "--budget", "240", "--kernelbench", str(kb)]
        )
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    doc = json.loads((tmp_path / "kernelbench_l1.json").read_text())
    assert doc["tool"] == "headroom verify" and doc["dry_run"] is True and doc["wall_s"] > 0
    assert (tmp_path / "kernelbench_l1.log").read_text().count("19_ReLU") >= 4
    by = {(r["group"], r["kind"], r["problem"]): r for r in doc["results"]}
    assert by[("level1", "reference", "19_ReLU")]["as_expected"]
    assert by[("level1", "zeros", "19_ReLU")]["verdict"] == "fail"
    assert by[("level1-extra", "partial_write", "19_ReLU")]["verdict"] == "fail"
    assert by[("level1-extra", "shape_cache", "19_ReLU")]["verdict"] == "fail"
    assert {r["kind"] for r in doc["results"] if r["group"] == "candidates"} == {"honest", "cheat"}
    adversarial = [r for r in doc["results"] if r["group"] == "adversarial"]
    assert len(adversarial) == 3 and all(r["verdict"] != "pass" and r["as_expected"] for r in adversarial)
    assert len([r for r in doc["results"] if r["group"] == "examples"]) == 7
    assert len(doc["builds"]) == 9  # every load_inline candidate was built (on a CPU: failed) before any timing
    sealed = [r for r in doc["results"] if r["group"] == "sealed"]
    attacks = [p for p in gpu_kernelbench.SEALED.glob("*.py") if not p.name.startswith("_")]
    assert len(sealed) == len(attacks) >= 12 and {r["kind"] for r in sealed} == {"sealed_probe", "sealed_attack"}
    assert all(r["verdict"] != "pass" for r in sealed if r["kind"] == "sealed_attack")
    ref = by[("level1", "reference", "19_ReLU")]["per_call"]
    assert ref["candidate"]["top_kernels"] and [k["name"] for k in ref["candidate"]["top_kernels"]] == [
        k["name"] for k in ref["reference"]["child"]["top_kernels"]
    ]
    md = gpu_kernelbench.render_markdown(doc)
    assert "| 19_ReLU | reference.py |" in md and "| level1 | zeros | fail |" in md


def test_an_unknown_group_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        gpu_kernelbench.main(["--out", str(tmp_path), "--groups", "level1,nope"])
    assert e.value.code == 2 and "unknown group(s) nope" in capsys.readouterr().err


def test_extra_only_picks_the_level1_extra_problems():
    items = gpu_kernelbench.plan(kernelbench_dir(), ["45", "68"], ["97"])
    by = {g: [it.problem.stem.split("_")[0] for it in items if it.group == g] for g in ("level1", "level1-extra")}
    assert by == {"level1": ["45", "68"], "level1-extra": ["97"]}


def test_every_sealed_candidate_has_its_verdict_on_each_seal(monkeypatch):
    from headroom.verify import sandbox

    attacks = {p.stem for p in gpu_kernelbench.SEALED.glob("*.py") if not p.name.startswith("_")}
    assert set(gpu_kernelbench.SEALED_EXPECTED) == attacks
    assert all(set(v) == {"uid", "same-uid", "cpu-same-uid"} for v in gpu_kernelbench.SEALED_EXPECTED.values())
    # a written reference: caught against the truth on a CPU, out of reach on the GPU (weights on the device)
    assert [
        gpu_kernelbench.SEALED_EXPECTED["attack_reference_memory"][k] for k in ("uid", "same-uid", "cpu-same-uid")
    ] == ["pass", "pass", "fail"]
    monkeypatch.delenv(sandbox.CUDA_UID_ENV, raising=False)
    assert gpu_kernelbench.seal_kind("cuda:0") == "same-uid"
    monkeypatch.setenv(sandbox.CUDA_UID_ENV, "1")
    monkeypatch.setenv(sandbox.OFF_ENV, "uid")
    assert gpu_kernelbench.seal_kind("cuda:0") == "same-uid" and gpu_kernelbench.seal_kind("cpu") is None
    monkeypatch.setenv(sandbox.OFF_ENV, "uid,ns")
    assert gpu_kernelbench.seal_kind("cpu") == ("cpu-same-uid" if os.geteuid() == 0 else None)
    monkeypatch.setenv(sandbox.OFF_ENV, "uid")
    it = gpu_kernelbench.Item("sealed", gpu_kernelbench.SEALED_PROBLEM, [])
    r = gpu_kernelbench._tag(
        {"candidate": str(gpu_kernelbench.SEALED / "probe_reach.py"), "verdict": "fail"}, it, "sealed_probe", "same-uid"
    )
    assert (r["expected"], r["as_expected"], r["seal"]) == ("fail", True, "same-uid")
    r = gpu_kernelbench._tag(
        {"candidate": str(gpu_kernelbench.SEALED / "attack_forkserver.py"), "verdict": "fail"},
        it,
        "sealed_attack",
        "uid",
    )
    assert (r["expected"], r["as_expected"]) == ("error", False)


def test_every_isolation_attack_has_its_verdicts_on_each_device():
    attacks = {p.stem for p in gpu_kernelbench.ISOLATION.glob("*.py") if not p.name.startswith("_")}
    assert set(gpu_kernelbench.ISOLATION_EXPECTED) == attacks
    for name, v in gpu_kernelbench.ISOLATION_EXPECTED.items():
        assert set(v) == {"cpu", "cuda"} and all(v.values()), name
    it = gpu_kernelbench.Item("isolation", gpu_kernelbench.SEALED_PROBLEM, [])
    cand = str(gpu_kernelbench.ISOLATION / "attack_ring_inplace.py")
    r = gpu_kernelbench._tag({"candidate": cand, "verdict": "error"}, it, "isolation", "uid", "cpu")
    assert r["as_expected"] and r["expected"] == "error"
    r = gpu_kernelbench._tag({"candidate": cand, "verdict": "error"}, it, "isolation", "same-uid", "cuda:0")
    assert not r["as_expected"] and r["expected"] == "fail"
    r = gpu_kernelbench._tag({"candidate": cand, "verdict": "pass"}, it, "isolation", "uid", "cpu")
    assert not r["as_expected"]


def test_the_gpu_runs_groups_in_a_dry_run_with_a_summary(tmp_path):
    """The GPU command's groups (isolation, level1 identical kernels) on a CPU, with --summary."""
    kb = kernelbench_dir()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    summary = tmp_path / "verify_gpu.json"
    try:
        rc = gpu_kernelbench.main(
            [
                "--out",
                str(tmp_path),
                "--dry-run",
                "--groups",
                "isolation,level1",
                "--only",
                "1",
                "--budget",
                "200",
                "--kernelbench",
                str(kb),
                "--summary",
                str(summary),
            ]
        )
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    doc = json.loads(summary.read_text())
    assert doc["groups"]["isolation"]["results"] == len(gpu_kernelbench.ISOLATION_EXPECTED)
    assert doc["groups"]["level1"]["results"] == 1
    rows = {(r["group"], r["candidate"]): r for r in doc["results"]}
    ident = rows[("level1", "reference.py")]
    assert ident["verdict"] in ("pass", "inconclusive"), ident
    for name in ("attack_ring_write", "attack_ring_inplace", "attack_release_precompute", "attack_output_span"):
        assert rows[("isolation", f"{name}.py")]["verdict"] != "pass", rows[("isolation", f"{name}.py")]
    assert summary.stat().st_size < 1 << 20 and len(list(tmp_path.iterdir())) <= 8


def test_the_summary_option_needs_a_value(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        gpu_kernelbench.main(["--out", str(tmp_path), "--summary"])
    assert e.value.code == 2


def test_the_sealed_preset_is_the_gpu_run():
    import argparse

    args = argparse.Namespace(
        preset="sealed", out="/o", groups="level1", only=None, max_rounds=24, budget=200.0, summary=None
    )
    gpu_kernelbench.apply_preset(args, ["--out", "/o", "--preset", "sealed", "--budget=200"])
    assert args.groups == "isolation,sealed,level1" and len(args.only) == 20 and len(set(args.only)) == 20
    assert args.summary == "/o/verify_gpu.json" and args.budget == 200 and args.max_rounds == 16
    assert all(p.stem.split("_")[0] in args.only for p in gpu_kernelbench._level1(kernelbench_dir(), args.only))
    assert len(gpu_kernelbench._level1(kernelbench_dir(), args.only)) == 20
