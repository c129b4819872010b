"""`headroom verify --graphs` on a CPU: the option through the command and the facade, its refusal on a
CPU, the Capture messages, the harness's check of a replay (the real truth and comparison, a scripted
child), and the verdicts a capture error, a wrong replay and a blocked phase give.

A real capture needs a GPU: the child's capture runs here only with torch.cuda's graph API replaced by
stand-ins (its error path). The GPU proof is in lab: `lab/probes/verify_graphs.py` (an honest candidate,
one calling `.item()`, one calling `torch.nonzero`, and the gated clock against a graph replay)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest
import torch
import typer
from typer.testing import CliRunner

import headroom.api
from headroom.cli import verify as cli_verify
from headroom.errors import UserError
from headroom.verify import capture, child_capture, shared
from headroom.verify import protocol as P
from headroom.verify.options import VerifyOptions
from headroom.verify.results import VerifyResult

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROBLEM = HERE / "cheaters" / "problems" / "gelu_linear.py"
CANDIDATE = HERE / "cheaters" / "candidates" / "honest_reimplementation.py"


# --- the option: command line and facade -------------------------------------------------------------


def test_graphs_is_off_by_default_and_refused_on_a_cpu():
    assert VerifyOptions().graphs is False
    assert VerifyOptions(device="cpu").resolved_device() == "cpu"
    with pytest.raises(UserError, match="--graphs: CUDA graphs need a GPU"):
        VerifyOptions(device="cpu", graphs=True).resolved_device()


def test_the_facade_refuses_graphs_on_a_cpu_before_any_work(monkeypatch):
    def started(*a, **k):  # the refusal comes before the reference is even loaded
        raise AssertionError("verify ran")

    monkeypatch.setattr("headroom.verify.verify_candidate", started)
    with pytest.raises(UserError, match="--graphs"):
        headroom.api.verify(PROBLEM, CANDIDATE, VerifyOptions(device="cpu", graphs=True))


def test_the_command_refuses_graphs_on_a_cpu_in_one_line_exit_2():
    p = subprocess.run(
        [sys.executable, "-m", "headroom.cli", "verify", str(PROBLEM), str(CANDIDATE), "--device", "cpu", "--graphs"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "--graphs" in p.stderr and "GPU" in p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""


def test_the_command_passes_graphs_to_verify_and_prints_the_capture(monkeypatch):
    """--graphs reaches VerifyOptions (a GPU stood in for by the device check), and the result's capture
    field is printed."""
    seen: list[VerifyOptions] = []

    def fake_verify(problem, candidate, options, progress=None):
        seen.append(options)
        return VerifyResult(
            problem="gelu_linear",
            candidate=str(candidate),
            verdict="error",
            reason="breaks capture: RuntimeError: boom",
            capture="breaks capture: RuntimeError: boom",
        )

    monkeypatch.setattr(VerifyOptions, "resolved_device", lambda self: "cuda:0")
    monkeypatch.setattr("headroom.verify.verify_candidate", fake_verify)
    app = typer.Typer()
    cli_verify.register(app)
    runner = CliRunner()
    r = runner.invoke(app, ["verify", str(PROBLEM), str(CANDIDATE), "--graphs"])
    assert r.exit_code == 1 and seen and seen[-1].graphs is True
    assert "capture: breaks capture: RuntimeError: boom" in r.stdout
    r = runner.invoke(app, ["verify", str(PROBLEM), str(CANDIDATE)])
    assert seen[-1].graphs is False


# --- the messages ------------------------------------------------------------------------------------


def test_capture_messages_round_trip_and_pair():
    ring = P.RingTensor(offset=64, dtype="float32", shape=(4, 8), stride=(8, 1))
    cmd = P.Capture(seq=3, args=[ring, P.Scalar(2)], replay=[ring, P.Scalar(2)])
    assert P.decode_command(P.encode(cmd)) == cmd
    done = P.CaptureDone(seq=3, outputs=[P.BytesTensor("float32", (1,), b"\0\0\0\0")], violations=[], error=None)
    bad = P.CaptureDone(seq=3, outputs=[], violations=["time.perf_counter"], error="RuntimeError: x")
    assert P.decode_reply(P.encode(done)) == done and P.decode_reply(P.encode(bad)) == bad
    assert P.EXPECTED_REPLY[P.Capture] is P.CaptureDone
    with pytest.raises(msgspec.ValidationError):  # a field the harness does not know is a malformed reply
        P.decode_reply(
            msgspec.msgpack.encode(
                {"type": "capture_done", "seq": 3, "outputs": [], "violations": [], "captured": True}
            )
        )


# --- the child's error report (torch.cuda's graph API stood in for: a CPU cannot capture) -------------


def test_error_line_is_the_first_error_of_the_chain_first_line_capped():
    try:
        try:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore detail")
        except RuntimeError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture") from None
    except RuntimeError as e:
        chained = e
    # `from None` hides the context from a traceback, but it is still the first error
    assert (
        child_capture.error_line(chained)
        == "RuntimeError: CUDA error: operation not permitted when stream is capturing"
    )
    assert len(child_capture.error_line(ValueError("x" * 1000))) == 300
    assert child_capture.error_line(KeyError()) == "KeyError"
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__context__, b.__context__ = b, a  # a loop ends the walk, not the child
    assert child_capture.error_line(a) == "RuntimeError: b"


def test_a_call_that_breaks_capture_is_reported_not_raised(monkeypatch):
    class Graph:
        def replay(self):
            raise AssertionError("replayed after a failed capture")

    @contextlib.contextmanager
    def graph(g, capture_error_mode="global"):
        assert capture_error_mode == "thread_local"
        try:
            yield
        except Exception:  # as torch's: ending a capture that failed raises too
            raise RuntimeError("capture_end: operation failed due to a previous error during capture") from None

    side = SimpleNamespace(wait_stream=lambda s: None)
    monkeypatch.setattr(torch.cuda, "Stream", lambda: side)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: side)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    calls = []

    def model(x):
        calls.append(x)
        if len(calls) == 2:  # the warm-up passes; the captured call syncs with the host
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return x * 2

    x = torch.ones(3)
    outs, err = child_capture.capture_call(model, [x], [x + 1], lambda: None)
    assert outs == [] and err == "RuntimeError: CUDA error: operation not permitted when stream is capturing"
    assert calls[1] is not x and torch.equal(calls[1], x)  # captured on a static copy, not the ring's view


# --- the harness's check: the real truth and comparison, a scripted child ----------------------------


class _ScriptedChild:
    """Answers Capture as a child would: its outputs computed by the harness's reference on the replay's
    inputs (``replayed``), on the capture's (a graph that baked in what it saw), or an error."""

    def __init__(self, ref, mode: str):
        self.ref, self.mode, self.ring_generation = ref, mode, ref.ring.generation
        self.commands: list = []

    def request(self, cmd, stage=None, **kw):
        self.commands.append(cmd)
        if self.mode == "error":
            return P.CaptureDone(seq=cmd.seq, outputs=[], violations=[], error="RuntimeError: not permitted")
        xs = shared.view_all(self.ref.ring, cmd.replay if self.mode == "replayed" else cmd.args)
        with torch.no_grad():
            out = self.ref.model(*xs)
        return P.CaptureDone(seq=cmd.seq, outputs=[shared.describe(out, "bytes")], violations=["x.y"], error=None)


@pytest.fixture(scope="module")
def reference():
    from headroom.verify import prepare_reference

    ref = prepare_reference(PROBLEM, VerifyOptions.quick())
    yield ref
    ref.close()


def test_check_compares_the_replay_with_the_truth_of_the_replayed_inputs(reference):
    good = capture.check(reference, cast(Any, _ScriptedChild(reference, "replayed")), 1 << 20, "the candidate", [])
    assert good.ok and good.status() == "ok" and good.violations == ["x.y"]
    child = _ScriptedChild(reference, "baked")
    baked = capture.check(reference, cast(Any, child), 1 << 20, "the candidate", [])
    assert not baked.ok and baked.error is None and "rel_l2" in str(baked.mismatch)
    assert baked.status().startswith("breaks capture: the replay's output is wrong")
    cmd = child.commands[0]
    assert isinstance(cmd, P.Capture) and cmd.args != cmd.replay  # replayed on other inputs than captured
    err = capture.check(reference, cast(Any, _ScriptedChild(reference, "error")), 1 << 20, "the candidate", [])
    assert err.error == "RuntimeError: not permitted" and err.status() == "breaks capture: RuntimeError: not permitted"


# --- the verdicts -----------------------------------------------------------------------------------


GATED = {"clock": "gated", "candidate_blocked": False}


def test_judge_capture_error_mismatch_blocked_and_the_reference():
    ok, err = capture.Outcome(), capture.Outcome(error="RuntimeError: not permitted")
    wrong = capture.Outcome(mismatch="rel_l2: graph replay: relative L2 error 1e+00")
    assert capture.judge(None, None, None) == capture.Judged("not checked")
    assert capture.judge(ok, ok, GATED) == capture.Judged("ok")
    j = capture.judge(err, ok, None)
    assert (j.verdict, j.capture) == ("error", "breaks capture: RuntimeError: not permitted") and j.reason == j.capture
    j = capture.judge(wrong, ok, None)
    assert j.verdict == "fail" and str(j.reason).startswith("breaks capture: the replay's output is wrong (rel_l2")
    j = capture.judge(ok, ok, {"clock": "gated", "candidate_blocked": True})
    assert j.verdict == "error" and str(j.reason).startswith("breaks capture: a timed phase waited on the GPU")
    assert "host synchronisation" in j.capture
    j = capture.judge(err, capture.Outcome(error="RuntimeError: ref"), None)  # not the candidate's failure
    assert j.verdict == "inconclusive" and "the reference breaks capture: RuntimeError: ref" in str(j.reason)
    j = capture.judge(
        ok,
        ok,
        {"clock": "plain", "candidate_blocked": False, "calibration": {"gate_unavailable": "no cuStreamWaitValue32"}},
    )
    assert j.verdict == "inconclusive" and "no cuStreamWaitValue32" in str(j.reason) and j.capture == "ok"


def _finished(caps, aggs=None, error=None, graphs=True) -> VerifyResult:
    from headroom.verify import candidate
    from headroom.verify import compare as cmp

    ref = SimpleNamespace(
        options=VerifyOptions(graphs=graphs),
        timing=None,
        device="cuda:0",
        estimate=None,
        seeds=SimpleNamespace(drawn={}),
    )
    res = VerifyResult(problem="p", candidate="c.py", verdict="error")
    candidate._finish(cast(Any, ref), res, aggs or cmp.new_aggs(), None, {}, error, {}, caps)
    return res


def test_the_result_carries_the_capture_verdict_after_the_correctness_checks():
    from headroom.verify import compare as cmp

    res = _finished((capture.Outcome(error="RuntimeError: not permitted"), capture.Outcome()))
    assert res.verdict == "error" and str(res.reason).startswith("breaks capture:") and res.capture == res.reason
    res = _finished((capture.Outcome(mismatch="rel_l2: off"), capture.Outcome()))
    assert res.verdict == "fail" and str(res.reason).startswith("breaks capture:")
    aggs = cmp.new_aggs()
    aggs["rel_l2"].record(False, "trial 1: relative L2 error 1e+00")
    res = _finished((None, None), aggs)  # a wrong candidate fails its trials: capture was never asked
    assert res.verdict == "fail" and str(res.reason).startswith("rel_l2") and res.capture == "not checked"
    res = _finished((None, None), graphs=False)
    assert res.capture == "not checked" and res.reason == "the candidate was not timed"


def test_the_docs_quote_the_committed_gpu_run():
    """docs/verify.md's "Under CUDA graphs" numbers are those of docs/gpu/verify/graphs-h100.json."""
    import json

    repo = Path(__file__).resolve().parents[1]
    doc = json.loads((repo / "docs" / "gpu" / "verify" / "graphs-h100.json").read_text())
    text = " ".join((repo / "docs" / "verify.md").read_text().split())
    honest = [r for r in doc["runs"] if r["candidate"] == "identical"]
    assert len(honest) == 3 and all(r["verdict"] == "pass" and r["capture"] == "ok" for r in honest)
    names = {"gelu": "GELU", "softmax": "softmax", "matmul": "matmul"}
    for r in honest:
        assert f"{r['speedup']:.3f}x ({names[r['problem']]})" in text, r["problem"]
    for c in doc["clocks"]:
        assert f"{1e3 * c['gated_ms']:.1f} µs and {1e3 * c['replay_ms_fresh_inputs']:.1f} µs" in text, c["problem"]
    breakers = [r for r in doc["runs"] if r["candidate"] in ("item", "nonzero")]
    assert breakers and all(r["verdict"] == "error" and r["capture"].startswith("breaks capture:") for r in breakers)
