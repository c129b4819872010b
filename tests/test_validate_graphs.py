"""headroom.validate.graphs: a --graphs side's profile is the capture (module ranges on) and replays of it, with
the manifest naming the capture trace. CUDA graphs cannot be captured on a CPU, so the capture is stood in for by
a profiled eager step; the GPU run (lab/gpu/gpu_validate.py, rows `*-graphs`) records the real one."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from headroom.errors import UserError
from headroom.extract.record import module_ranges, record_trace, remove
from headroom.profile.graphs import Captured
from headroom.profile.registry import get_workload
from headroom.profile.workload import Options
from headroom.trace.graphs import capture_trace_of
from headroom.trace.ranges import MODULE_RANGE_PREFIX


def test_graphs_are_refused_on_a_cpu_before_any_capture():
    from headroom.validate.graphs import graph_sides

    used = []
    with pytest.raises(UserError, match="--graphs needs a CUDA device"):
        graph_sides(lambda: None, used.append, torch.device("cpu"))
    assert used == []  # nothing was switched or run


class _Replays:
    """A stand-in CUDA graph: each replay runs the eager step and is counted."""

    def __init__(self, step):
        self.step, self.n = step, 0

    def replay(self):
        self.n += 1
        self.step()


def test_a_graphs_side_records_its_capture_and_profiles_replays(tmp_path: Path, monkeypatch):
    import headroom.validate.graphs as vg

    spec = get_workload("llama-7b")
    cfg = spec.resolve(Options(flavour="tiny", phase="decode", batch=1), "cpu")
    step = spec.build(cfg, torch.device("cpu"))
    graphs: list[_Replays] = []

    def fake_capture(step_fn, device, path, *, activities, record_shapes, experimental):
        from torch.profiler import ProfilerActivity, profile, record_function

        with profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes) as prof:
            with record_function("headroom/graph-capture"):
                step_fn()
        prof.export_chrome_trace(str(path))
        graphs.append(_Replays(step_fn))
        return Captured(graphs[-1], 0.001)

    monkeypatch.setattr(vg, "recorded_capture", fake_capture)
    dest = tmp_path / "base.json.gz"
    manifest = {
        "tool": "headroom validate",
        "side": "base",
        "workload": cfg.workload,
        "variant": cfg.variant,
        "trace": dest.name,
    }
    handles = module_ranges(step)
    try:
        vg.record_graph_trace(step, torch.device("cpu"), dest, manifest, cfg, record_trace, steps=2)
    finally:
        remove(handles)
        step.close()
    meta = json.loads(gzip.open(dest).read())["headroom"]
    capture = capture_trace_of(dest, {"headroom": meta})
    assert capture == tmp_path / "captures" / dest.name and capture.is_file()
    assert json.loads(gzip.open(capture).read())["headroom"]["capture_of"] == dest.name
    assert meta["graphs"]["capture_s"] == pytest.approx(0.001)
    assert len(graphs) == 1 and graphs[0].n == 1 + 1 + 2  # wait + warm-up + profiled: replays only
    capture_ranges = {e.get("name") for e in json.loads(gzip.open(capture).read())["traceEvents"]}
    assert any(str(n).startswith(MODULE_RANGE_PREFIX + "model") for n in capture_ranges)  # ranges on in the capture
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.json.gz", "captures"]  # no raw file left


def test_graphs_build_the_static_step_and_refuse_a_dynamic_cache_before_any_model(tmp_path: Path):
    from headroom.validate.api import validate

    cand = Path(__file__).resolve().parents[1] / "examples" / "substitutions" / "gpt2_gelu_tanh.py"
    with pytest.raises(UserError, match="dynamic KV cache"):
        validate(
            "gpt2-xl",
            [f"NewGELUActivation={cand}"],
            Options(phase="decode", kv_cache="dynamic"),
            device="auto",
            out=tmp_path / "run",
            graphs=True,
        )
    assert not (tmp_path / "run").exists()  # refused before the run's folder was made
