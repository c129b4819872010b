"""lab/probes/module_ranges.py on the CPU: interleaved A/B rounds, and B really records module ranges."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from lab.probes.module_ranges import main  # noqa: E402


def test_interleaved_rounds_with_and_without_module_ranges(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--cpu", "--case", "llama-7b decode static", "--target-s", "0.001", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    (case,) = d["cases"]
    assert case["rounds"] == 7 and case["steps_per_measurement"] == 3
    # 2 layers x 13 modules + model, LlamaModel, embedding, rotary, final norm, lm_head; each called once.
    assert case["modules_with_ranges"] == case["module_calls_per_step"] == 32
    for setting in ("plain", "profiled"):
        s = case[setting]
        assert s["order"] == ["AB", "BA", "AB", "BA", "AB", "BA", "AB"]
        assert len(s["off_ms"]) == len(s["on_ms"]) == 7 and min(s["off_ms"] + s["on_ms"]) > 0
        assert s["ratios"] == pytest.approx([b / a for a, b in zip(s["off_ms"], s["on_ms"])])
        lo, hi = s["ci95"]
        assert lo <= sum(s["ratios"]) / 7 - 1 <= hi
    # The profiler saw no module range without the hooks and one per module call with them.
    assert case["profiled"]["module_ranges_per_step"] == {"off": 0, "on": 32}
    printed = capsys.readouterr().out
    assert "llama-7b decode static" in printed and "n/a (launch-bound)" in printed


def test_fewer_than_seven_rounds_is_refused(tmp_path, capsys):
    assert main(["--cpu", "--rounds", "5", "--out", str(tmp_path / "r.json")]) == 2
    assert "at least 7" in capsys.readouterr().err
    assert main(["--cpu", "--case", "nope", "--out", str(tmp_path / "r.json")]) == 2
    assert not (tmp_path / "r.json").exists()
