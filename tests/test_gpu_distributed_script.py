"""lab/gpu/gpu_distributed.py (the [distributed-h200x2] command) in its CPU/gloo dry mode."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import REPO


@pytest.mark.slow  # a lab script's whole dry run: `make test-slow` (lab code, not the product)
def test_dry_run_writes_the_report_results_and_rank_traces(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "lab" / "gpu" / "gpu_distributed.py"),
            str(out),
            "--dry",
            "--only",
            "resnet-50-ddp",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    files = sorted(f.name for f in out.iterdir())
    assert files == ["distributed.log", "ranks.tar", "report.md", "results.json"]
    assert all(f.stat().st_size < 16 * 2**20 for f in out.iterdir())
    with tarfile.open(out / "ranks.tar") as t:
        names = sorted(m.name.rsplit("/", 1)[-1] for m in t.getmembers() if m.isfile())
    assert names == ["manifest.json", "rank-0.json.gz", "rank-1.json.gz"]
    res = json.loads((out / "results.json").read_text())
    run = res["runs"]["resnet-50-ddp"]
    assert res["tar"] == ["ranks.tar"] and run["status"] == "ok"
    assert run["command"].startswith("headroom profile resnet-50 --nproc 2 --parallel ddp")
    s = run["analysis"]
    assert s["ranks"] == [0, 1] and s["backend"] == "gloo" and s["parallel"] == "ddp" and s["collectives"] > 0
    gains = {k: v["synchronised"]["speedups"]["gain"] for k, v in s["projections"].items()}
    assert set(gains) == {"all_ranks", "slowest_rank", "other_ranks"}
    # more kernels faster never makes the synchronised step slower
    assert 0.0 <= gains["other_ranks"] <= gains["all_ranks"] and 0.0 <= gains["slowest_rank"] <= gains["all_ranks"] < 1
    assert all(abs(v["synchronised"]["speedups"]["identity_error_us"]) < 1.0 for v in s["projections"].values())
    assert s["one_gpu"]["trace"] == "traces/resnet-50.train.json.gz"
    md = (out / "report.md").read_text()
    assert "## resnet-50-ddp" in md and "| all ranks |" in md and "| other ranks |" in md
    assert res["runs"].keys() == {"resnet-50-ddp"}
