"""scripts/gpu_kernelbench.py (the H200 run) in its CPU dry-run mode: every group runs, results and the
wall time are written, each result says whether it is as expected, and the docs table renders."""

from __future__ import annotations

import json
import sys

import torch

from verify_support import REPO, kernelbench_dir

sys.path.insert(0, str(REPO / "scripts"))
import gpu_kernelbench  # noqa: E402


def test_dry_run_writes_every_group_and_renders(tmp_path):
    kb = kernelbench_dir()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rc = gpu_kernelbench.main(["--out", str(tmp_path), "--dry-run", "--only", "19", "--budget", "240",
                                   "--kernelbench", str(kb)])
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
    md = gpu_kernelbench.render_markdown(doc)
    assert "| 19_ReLU | reference.py |" in md and "| level1 | zeros | fail |" in md
