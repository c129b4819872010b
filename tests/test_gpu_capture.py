"""scripts/gpu_capture.py in its dry mode (the GPU plan at tiny sizes on the CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import REPO

pytest.importorskip("transformers")


def test_dry_capture_packs_traces_targets_and_results(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "scripts/gpu_capture.py", str(out), "300", "--dry",
                        "--only", "llama-7b-decode,llama-13b-layers4"], cwd=REPO, capture_output=True, text=True,
                       timeout=280)
    assert p.returncode == 0, p.stderr[-2000:]
    files = sorted(f.name for f in out.iterdir())
    assert files == ["capture.log", "checks.tar", "results.json", "targets.json", "traces-1.tar"]
    assert all(f.stat().st_size < 16 * 2**20 for f in out.iterdir())
    with tarfile.open(out / "traces-1.tar") as tar:
        assert sorted(tar.getnames()) == ["traces/llama-7b.tiny.infer.decode.static-cache.json.gz",
                                          "traces/manifest.json"]
    with tarfile.open(out / "checks.tar") as tar:
        assert sorted(tar.getnames()) == ["traces/scaling/llama-7b.tiny.infer.prefill.1of2-layers.json.gz",
                                          "traces/scaling/manifest-13b.json"]
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
    assert total["LlamaForCausalLM"]["share"] >= total["LlamaDecoderLayer"]["share"] > rows["LlamaDecoderLayer"]["share"]
    assert "--by module --scope self --json" in tables["module:self"]["command"]
