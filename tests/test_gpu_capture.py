"""lab/gpu/gpu_capture.py in its dry mode (the GPU plan at tiny sizes on the CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import REPO

pytest.importorskip("transformers")


@pytest.mark.slow  # a lab script's whole dry run: `make test-slow` (lab code, not the product)
def test_dry_capture_packs_traces_targets_and_results(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run(
        [
            sys.executable,
            "lab/gpu/gpu_capture.py",
            str(out),
            "300",
            "--dry",
            "--only",
            "llama-7b-decode,llama-13b-layers4",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    files = sorted(f.name for f in out.iterdir())
    assert files == ["capture.log", "checks.tar", "results.json", "targets.json", "traces-1.tar"]
    assert all(f.stat().st_size < 16 * 2**20 for f in out.iterdir())
    with tarfile.open(out / "traces-1.tar") as tar:
        assert sorted(tar.getnames()) == [
            "traces/llama-7b.tiny.infer.decode.static-cache.json.gz",
            "traces/manifest.json",
        ]
    with tarfile.open(out / "checks.tar") as tar:
        assert sorted(tar.getnames()) == [
            "traces/scaling/llama-7b.tiny.infer.prefill.1of2-layers.json.gz",
            "traces/scaling/manifest-13b.json",
        ]
    results = json.loads((out / "results.json").read_text())
    assert set(results["runs"]) == {"llama-7b-decode", "llama-13b-layers4"}
    decode = results["runs"]["llama-7b-decode"]
    assert decode["status"] == "ok" and decode["module_calls"] == 32 and decode["module_ranges"]["hooked"] == 32
    targets = json.loads((out / "targets.json").read_text())
    tables = targets["llama-7b.tiny.infer.decode.static-cache.json.gz"]
    assert set(tables) == {"module:self", "module:total", "module_path:self"}
    rows = {r["name"]: r for r in tables["module:self"]["targets"]}
    assert rows["LlamaRMSNorm"]["kind"] == "module" and rows["LlamaRMSNorm"]["calls"] == 5.0
    assert rows["Linear"]["calls"] == 15.0 and tables["module:self"]["notes"] == []
    total = {r["name"]: r for r in tables["module:total"]["targets"]}
    assert (
        total["LlamaForCausalLM"]["share"] >= total["LlamaDecoderLayer"]["share"] > rows["LlamaDecoderLayer"]["share"]
    )
    assert "--by module --scope self --json" in tables["module:self"]["command"]


def test_render_module_docs_fills_only_the_marked_tables(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("render_module_docs", REPO / "scripts" / "render_module_docs.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    row = {
        "kind": "module",
        "name": "LlamaRMSNorm",
        "calls": 65.0,
        "kernels_per_call": 9.0,
        "cpu_us_per_call": 61.5,
        "us": 90000.0,
        "share": 0.1234,
        "categories": {"elementwise": 0.8, "reduction": 0.2},
        "phases": {"forward": 1.0},
        "gain": 0.041,
        "gain_inf": 0.123,
        "replay_gain": 0.04,
        "replay_gain_inf": 0.12,
        "inputs": [{"inputs": "bf16[4,2048,4096]", "calls": 195}],
    }
    targets = {
        "llama-7b.infer.prefill.json.gz": {
            "module:self": {
                "command": "headroom targets llama-7b.infer.prefill.json.gz --by module --json",
                "per_step_us": 243548.0,
                "num_steps": 3,
                "speedup": 1.5,
                "targets": [row],
                "notes": [],
            }
        },
        "llama-7b.infer.prefill.compile.json.gz": {
            "module:self": {"per_step_us": 1.0, "num_steps": 3, "targets": [], "notes": ["X has no nn.Module ranges"]}
        },
    }
    case = {
        "name": "llama-7b prefill",
        "gpu_bound": True,
        "modules_with_ranges": 422,
        "module_calls_per_step": 422,
        "steps_per_measurement": 3,
        "plain": {"off_median_ms": 244.0, "overhead": 0.0021, "ci95": [-0.001, 0.005]},
        "profiled": {"off_median_ms": 245.0, "overhead": 0.004, "ci95": [0.0, 0.008]},
    }
    (tmp_path / "t.json").write_text(json.dumps(targets))
    (tmp_path / "o.json").write_text(json.dumps({"machine": {"gpu": "NVIDIA H200"}, "cases": [case]}))
    doc = tmp_path / "m.md"
    doc.write_text(
        "intro\n<!-- module-targets:begin -->\nold\n<!-- module-targets:end -->\nmiddle\n"
        "<!-- module-overhead:begin -->\nold\n<!-- module-overhead:end -->\nend\n"
    )
    assert render.main([str(tmp_path / "t.json"), str(tmp_path / "o.json"), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("intro\n") and "\nmiddle\n" in text and text.endswith("end\n") and "old" not in text
    assert (
        "| LlamaRMSNorm | 65 | 9.0 | 61.5 | 30.00 | 12.3% | elementwise 80%, reduction 20% | 4.10% | 12.30% | "
        "4.00% | 12.00% | `bf16[4,2048,4096]` |"
    ) in text
    assert "_X has no nn.Module ranges_" in text
    assert "| llama-7b prefill | 422 | 422 | 3 | 244.000 | 0.21% | [-0.10%, 0.50%] | 245.000 | 0.40% |" in text
    assert "| yes |" in text
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    assert render.main([str(tmp_path / "t.json"), str(tmp_path / "o.json"), "--doc", str(bare)]) == 2
    assert bare.read_text() == "no markers\n"
