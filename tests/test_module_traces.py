"""The shipped H200 traces (traces/, captured 2026-12-01 by lab/gpu/gpu_capture.py with nn.Module
ranges): `headroom targets --by module` on the committed trace, on a CPU, gives what the GPU machine
printed (docs/gpu/modules/targets.json) — and what docs/modules.md shows. The compiled Llama trace
has no module ranges (torch.compile runs every module inside the compiled graph; docs/modules.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headroom.trace.analysis import analyze

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "traces"
COMPILED = "llama-7b.infer.prefill.compile.json.gz"
ON_GPU = json.loads((REPO / "docs" / "gpu" / "modules" / "targets.json").read_text())
SHIPPED = sorted(p.name for p in TRACES.glob("*.json.gz") if p.name != COMPILED)
# The 2026-12-01 capture's; deepfm, din and dlrm-int8 came with lab/gpu/gpu_recsys.sh (docs/dlrm-bench.md).
NAMES = [n for n in SHIPPED if n in ON_GPU]


def test_every_shipped_trace_has_module_ranges_but_the_compiled_one():
    manifest = json.loads((TRACES / "manifest.json").read_text())["traces"]
    assert set(manifest) == {*SHIPPED, COMPILED} and len(NAMES) == 9 and len(SHIPPED) == 12
    assert all(manifest[n]["module_ranges"]["hooked"] > 0 for n in SHIPPED)
    assert all(manifest[n]["results"]["module_ranges_recorded"] > 0 for n in SHIPPED)
    compiled = manifest[COMPILED]
    assert compiled["compile"] and compiled["module_ranges"]["compiled"]
    assert compiled["results"]["module_ranges_recorded"] == 0 and "torch.compile" in compiled["module_ranges"]["note"]
    assert len(analyze(TRACES / COMPILED).modules) == 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("by,scope", [("module", "self"), ("module", "total")])
def test_targets_by_module_reproduce_the_gpu_run(headroom, name, by, scope):
    p = headroom("targets", TRACES / name, "--by", by, "--scope", scope, "--json", "--top", "0")
    assert p.returncode == 0, p.stderr
    got, want = json.loads(p.stdout), ON_GPU[name][f"{by}:{scope}"]
    assert got["num_steps"] == want["num_steps"]
    assert got["per_step_us"] == pytest.approx(want["per_step_us"], rel=1e-9)
    rows = {t["name"]: t for t in got["targets"]}
    assert list(rows) == [t["name"] for t in want["targets"]]
    for t in want["targets"]:
        g = rows[t["name"]]
        assert g["calls"] == t["calls"] and g["kernels"] == t["kernels"], t["name"]
        assert g["share"] == pytest.approx(t["share"], rel=1e-9) and g["gain"] == pytest.approx(t["gain"], rel=1e-9)


def test_the_top_modules_are_the_ones_docs_name():
    top = {n: ON_GPU[n]["module:self"]["targets"][0]["name"] for n in NAMES}
    assert top["dlrm.train.json.gz"] == "InteractionArch"
    assert top["dlrm-dcn.train.json.gz"] == "LowRankCrossNet"
    assert top["llama-7b.infer.prefill.json.gz"] == "Linear" and top["gpt2-xl.infer.prefill.json.gz"] == "Conv1D"
    assert top["resnet-50.train.json.gz"] == "BatchNorm2d"
