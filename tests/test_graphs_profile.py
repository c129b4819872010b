"""`headroom profile --graphs / --compile-mode`: what the options accept, the static decode step a graph
captures, and the capture trace a graphs run names in its manifest (the capture itself needs CUDA: the
committed GPU traces under traces/graphs/ are checked by tests/test_graphs.py)."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import SHARED

from headroom.errors import UserError
from headroom.profile.registry import get_workload
from headroom.profile.workload import Options
from headroom.trace.analysis import analyze
from headroom.trace.graphs import CAPTURE, capture_trace_of
from headroom.trace.load import TraceError

CAPTURE_TRACE = SHARED / "traces-cudagraph" / "llama4_decode_capture_and_replay.json.gz"


@pytest.mark.parametrize(
    "options, device, says",
    [
        (Options(phase="decode", graphs=True), "cpu", "needs a CUDA device"),
        (Options(mode="train", graphs=True), "cuda", "drop --mode train"),
        (Options(phase="decode", kv_cache="dynamic", graphs=True), "cuda", "--kv-cache static"),
        (Options(phase="decode", graphs=True, compile_mode="reduce-overhead"), "cuda", "drop --graphs"),
        (Options(compile_mode="fastest"), "cuda", "use one of default, reduce-overhead"),
    ],
)
def test_execution_modes_refuse_what_they_cannot_run(options, device, says):
    with pytest.raises(UserError, match=says):
        get_workload("llama-7b").resolve(options, device)


def test_execution_modes_name_the_run_and_stay_out_of_an_eager_manifest():
    from headroom.jsonio import plain

    spec = get_workload("llama-7b")
    graphs = spec.resolve(Options(phase="decode", batch=1, graphs=True), "cuda")
    compiled = spec.resolve(Options(phase="decode", compile_mode="reduce-overhead"), "cuda")
    eager = spec.resolve(Options(phase="decode"), "cuda")
    assert graphs.execution == "graphs" and graphs.tag.endswith(".graphs")
    assert compiled.compile and compiled.execution == "compiled-reduce-overhead"
    assert "compile-reduce-overhead" in compiled.variant
    assert eager.execution == "eager"
    assert "graphs" not in plain(eager) and "compile_mode" not in plain(eager)
    assert plain(graphs)["graphs"] is True and plain(compiled)["compile_mode"] == "reduce-overhead"


def test_the_static_decode_step_computes_the_eager_first_token():
    import torch

    spec = get_workload("llama-7b")
    cfg = spec.resolve(Options(flavour="tiny", phase="decode", seq=16, batch=2, kv_cache="static"), "cpu")
    torch.manual_seed(0)
    eager = spec.build(cfg, torch.device("cpu"))
    cfg.graphs = True  # the step --graphs captures (the capture itself needs CUDA)
    torch.manual_seed(0)
    static = spec.build(cfg, torch.device("cpu"))
    try:
        want = eager.forward()
        got = static.forward()
        torch.testing.assert_close(got, want)
        assert "fixed" in static.info["decode_position"]
        # the check of validate calls it once per side: the second call decodes the same token again,
        # though the step itself writes its argmax into the static input buffer
        static.fn()
        torch.testing.assert_close(static.forward(), want)
    finally:
        eager.close()
        static.close()


def _with_manifest(src, dest, manifest):
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["headroom"] = manifest
    dest.write_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.mark.skipif(not CAPTURE_TRACE.is_file(), reason="needs ../shared/traces-cudagraph")
def test_a_graphs_trace_reads_the_capture_its_manifest_names(tmp_path):
    trace = tmp_path / "run.json.gz"
    _with_manifest(CAPTURE_TRACE, trace, {"graphs": {"capture_trace": "captures/run.json.gz"}})
    assert (
        capture_trace_of(trace, {"headroom": {"graphs": {"capture_trace": "captures/run.json.gz"}}})
        == tmp_path / "captures" / "run.json.gz"
    )
    with pytest.raises(TraceError, match="capture trace .* which is missing"):
        analyze(trace, use_cache=False, window="^replay_")
    (tmp_path / "captures").mkdir()
    (tmp_path / "captures" / "run.json.gz").write_bytes(CAPTURE_TRACE.read_bytes())
    a = analyze(trace, use_cache=False, window="^replay_")
    replayed = a.events[a.events["graph"] != ""]
    assert len(replayed) == 3 * 237 and set(replayed["graph"]) == {CAPTURE}
