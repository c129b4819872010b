"""lab/gpu/gpu_fleet.py: the check and table of its comparison file, on the CPU dry run's file
(tests/data/fleet_kernelbench_dryrun.json) and on the H200 run's (docs/gpu/fleet/kernelbench_ray.json)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "lab" / "gpu"))
import gpu_fleet  # noqa: E402

DRY = REPO / "tests" / "data" / "fleet_kernelbench_dryrun.json"
H200 = REPO / "docs" / "gpu" / "fleet" / "kernelbench_ray.json"


def test_dry_run_file_agrees_and_a_changed_verdict_is_named():
    doc = json.loads(DRY.read_text())
    assert doc["dry_run"] is True and doc["ray_workers"] == "1 worker(s), {'num_gpus': 1, 'num_cpus': 1} each"
    assert [(c["problem"], c["candidate"]) for c in doc["compare"]] == [
        (p, k) for p in ("19_ReLU", "23_Softmax", "47_Sum_reduction_over_a_dimension") for k in ("reference", "zeros")
    ]
    assert gpu_fleet.check(doc, min_problems=3) == []
    bad = copy.deepcopy(doc)
    bad["compare"][0]["ray"] = "pass" if bad["compare"][0]["direct"] != "pass" else "inconclusive"
    bad["compare"][3]["ray"] = None
    bad["compare"][5].update(direct="pass", ray="pass")
    assert gpu_fleet.check(bad, min_problems=3, strict=False) == [
        "23_Softmax <- zeros: not verified on the Ray path",
        "47_Sum_reduction_over_a_dimension <- zeros: a cheat passed",
    ]
    assert gpu_fleet.check(bad, min_problems=4) == [
        "3 problems compared, expected at least 4",
        f"19_ReLU <- reference: {doc['compare'][0]['direct']} direct, {bad['compare'][0]['ray']} on Ray",
        "23_Softmax <- zeros: not verified on the Ray path",
        "47_Sum_reduction_over_a_dimension <- zeros: a cheat passed",
    ]
    table = gpu_fleet.render(doc).splitlines()
    assert table[0].startswith("cpu; torch ") and "same verdict on both paths: 6 of 6" in table[0]
    assert table[5] == "| 19_ReLU | zeros | fail | fail |"


def test_compare_pairs_the_paths_by_problem_and_candidate():
    direct = [
        {"problem": "a", "candidate": "reference", "verdict": "pass"},
        {"problem": "a", "candidate": "zeros", "verdict": "fail"},
    ]
    ray = [
        {"problem": "a", "candidate": "zeros", "verdict": "fail"},
        {"problem": "a", "candidate": "reference", "verdict": "inconclusive"},
    ]
    assert gpu_fleet.compare(direct, ray) == [
        {
            "problem": "a",
            "candidate": "reference",
            "direct": "pass",
            "ray": "inconclusive",
            "same": False,
            "same_class": True,
        },
        {"problem": "a", "candidate": "zeros", "direct": "fail", "ray": "fail", "same": True, "same_class": True},
    ]


@pytest.mark.skipif(not H200.is_file(), reason="the H200 run's file is not in the tree")
def test_h200_kernelbench_campaign_gives_the_same_verdicts_through_ray():
    doc = json.loads(H200.read_text())
    assert doc["dry_run"] is False and "H200" in doc["device"]
    assert doc["ray_workers"].startswith("1 worker(s), {'num_gpus': 1")
    # Every candidate the same verdict class on both paths (a correct candidate's pass or inconclusive is
    # its timing's call); the exact verdicts are the table's count, docs/fleet.md.
    assert gpu_fleet.check(doc, min_problems=10, strict=False) == []
    assert {c["direct"] for c in doc["compare"] if c["candidate"] == "zeros"} == {"fail"}
