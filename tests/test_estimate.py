"""Launch-aware speedup entries, the estimate with its interval, predict() and the project CLI contract
(headroom.projection.speedups, headroom.projection.estimate, headroom.projection.project)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from headroom.errors import UserError
from headroom.jsonio import plain
from headroom.projection.estimate import Drift, calibrate_drift, load_drift
from headroom.projection.project import predict, project
from headroom.projection.speedups import load_speedup_file, parse_cli_speedup
from headroom.trace.analysis import analyze
from tests.test_cpu_model import launch_bound

# --- launches in speedup entries ----------------------------------------------


def test_launches_on_the_command_line():
    e = parse_cli_speedup("module:RMSNorm=1.8,launches=1")
    assert (str(e.selector), e.speedup, e.launches) == ("module:RMSNorm", 1.8, 1)
    assert e.label == "module:RMSNorm=1.8,launches=1"
    assert parse_cli_speedup("op:aten::mul=2").launches is None
    assert parse_cli_speedup("kernel:^gemm=2, launches = 0").launches == 0
    for bad in ("module:X=2,launches=-1", "module:X=2,launches=1.5", "module:X=2,launches=x", "module:X=2,launches="):
        with pytest.raises(UserError, match="launches must be a whole number"):
            parse_cli_speedup(bad)


@pytest.mark.parametrize(
    "name,text",
    [
        ("s.toml", '[[speedup]]\nselect = "module:RMSNorm"\nspeedup = 1.8\nlaunches = 1\n'),
        ("s.json", '{"speedups": [{"select": "module:RMSNorm", "speedup": 1.8, "launches": 1}]}'),
        ("s.csv", "select,speedup,launches\nmodule:RMSNorm,1.8,1\n"),
    ],
)
def test_launches_in_speedup_files(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    (e,) = load_speedup_file(p).entries
    assert (e.speedup, e.launches) == (1.8, 1)


def test_bad_launches_in_a_file_name_the_entry(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[[speedup]]\nselect = "module:RMSNorm"\nspeedup = 1.8\nlaunches = true\n')
    with pytest.raises(UserError, match=r"#1: launches must be a whole number"):
        load_speedup_file(p)


def test_verify_results_carry_the_candidates_launches_per_call(tmp_path):
    p = tmp_path / "v.json"
    p.write_text(
        json.dumps(
            {
                "tool": "headroom verify",
                "version": 1,
                "results": [
                    {
                        "problem": "36_RMSNorm_",
                        "verdict": "pass",
                        "speedup": 2.5,
                        "launches_per_call": {"reference": 8, "candidate": 1, "method": "CUDA kernels in one forward"},
                    },
                    {
                        "problem": "23_Softmax",
                        "verdict": "pass",
                        "speedup": 1.2,
                        "launches_per_call": {"reference": 3, "candidate": None, "method": "not measured: ..."},
                    },
                    {"problem": "19_ReLU", "verdict": "pass", "speedup": 1.1},
                ],
            }
        )
    )
    by = {str(e.selector): e.launches for e in load_speedup_file(p).entries}
    assert by == {"problem:36_RMSNorm_": 1, "problem:23_Softmax": None, "problem:19_ReLU": None}


def test_a_candidate_timed_serialised_projects_its_kernel_time_ratio_and_its_syncs(tmp_path):
    """A candidate that synchronises with the host is timed serialised by verify (its speedup mixes in
    the CPU time of the wait); the projection takes its kernels' profiled ratio for the GPU side and
    its syncs and call_us for the CPU side. A candidate timed on the GPU clock keeps its speedup."""

    def result(problem, clock, speedup):
        return {
            "problem": problem,
            "verdict": "pass",
            "speedup": speedup,
            "launches_per_call": {"reference": 8, "candidate": 6},
            "timing": {"clock": "gated", "candidate_clock": clock},
            "per_call": {
                "reference": {"kernel_us": 439.4, "call_us": 114.7, "syncs": 0.0},
                "candidate": {"kernel_us": 167.2, "call_us": 133.3, "syncs": 1.0},
            },
        }

    p = tmp_path / "v.json"
    p.write_text(
        json.dumps(
            {
                "tool": "headroom verify",
                "version": 1,
                "results": [result("llama__LlamaRMSNorm", "plain", 1.64), result("bert__LayerNorm", "gated", 1.76)],
            }
        )
    )
    f = load_speedup_file(p)
    by = {str(e.selector): e for e in f.entries}
    s = by["problem:llama__LlamaRMSNorm"]
    assert s.speedup == pytest.approx(439.4 / 167.2) and (s.syncs, s.call_us, s.launches) == (1.0, 133.3, 6)
    assert by["problem:bert__LayerNorm"].speedup == 1.76
    assert any("timed serialised" in w and "2.628x" in w for w in f.warnings)


# --- the interval ----------------------------------------------------------------


def test_drift_parameters_are_shipped_data():
    d = load_drift()
    assert (d.slower, d.faster) == (0.04, 0.01) and "hand measurements on the H200" in d.source


def test_bad_drift_file(tmp_path):
    p = tmp_path / "p.toml"
    p.write_text("[gpu_drift]\nslower = 1.5\nfaster = 0.0\n")
    with pytest.raises(UserError, match="gpu_drift.slower must be a fraction"):
        load_drift(p)


def test_calibrate_drift_from_measurements():
    # Measured 1.10x where the model said 1.13x with 80% of the base untouched: the untouched kernels
    # ran (1/1.10 - 1/1.13) / 0.8 = 3.02% slower; a second case ran 0.5% faster.
    d = calibrate_drift([(1.10, 1.13, 0.8), (1.21, 1.2, 0.8)])
    assert d.slower == pytest.approx((1 / 1.10 - 1 / 1.13) / 0.8)
    assert d.faster == pytest.approx(-(1 / 1.21 - 1 / 1.2) / 0.8)
    with pytest.raises(UserError):
        calibrate_drift([])


def test_zero_drift_makes_the_gpu_bound_interval_the_cpu_outcomes(tmp_path):
    from tests.test_cpu_model import gpu_bound

    r = project(analyze(gpu_bound(tmp_path)), [parse_cli_speedup("module:RMSNorm=4,launches=1")], drift=Drift(0.0, 0.0))
    # GPU-bound: where the CPU's work goes does not matter, so the interval closes.
    assert r.estimate.low == pytest.approx(r.estimate.speedup) == pytest.approx(r.estimate.high)


# --- predict(): what validate calls -------------------------------------------------


def test_predict_returns_amdahl_replay_and_the_estimate(tmp_path):
    a = analyze(launch_bound(tmp_path, step_ms=1.188))
    p = predict(a, "module:RMSNorm", 4.0, launches=1)
    assert p.amdahl == pytest.approx(3564 / (3564 - 360.0), rel=1e-4)  # Amdahl on the unprofiled clock
    assert p.estimate == pytest.approx(p.result.estimate.speedup)
    assert p.low <= 1.001 and p.low < p.estimate < p.high
    assert p.estimate == pytest.approx(p.replay, rel=1e-9)  # the CPU-aware replay, unprofiled
    d = plain(p)
    assert set(d) == {"amdahl", "replay", "estimate", "low", "high", "method"}
    assert "CPU clock x0.600" in d["method"]
    with pytest.raises(UserError, match="speedup must be > 0"):
        predict(a, "module:RMSNorm", 0.0)


# --- the CLI ---------------------------------------------------------------------


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "headroom.cli", *map(str, args)], capture_output=True, text=True)


def test_project_json_leads_with_the_estimate(tmp_path):
    path = launch_bound(tmp_path, step_ms=1.188)
    out = _cli("project", path, "-s", "module:RMSNorm=4,launches=1", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    e = d["estimate"]
    assert {"speedup", "low", "high", "method"} <= set(e)
    assert e["low"] <= e["speedup"] <= e["high"] and e["clock"] == "unprofiled"
    assert d["unprofiled"]["step_us"] == pytest.approx(1188.0) and d["unprofiled"]["source"] == "manifest"
    assert d["entries"][0]["launches"] == 1 and d["entries"][0]["cpu"]["calls"] == 60
    replay = next(p for p in d["projections"] if p["method"] == "replay" and p["scenario"] == "speedups")
    assert replay["unprofiled"]["speedup"] == pytest.approx(e["speedup"])
    text = _cli("project", path, "-s", "module:RMSNorm=4,launches=1", "--step-ms", "1.5")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[1].startswith("estimate (speedups): ") and "1.500 ms/step (--step-ms)" in lines[1] + lines[2]
    bad = _cli("project", path, "-s", "module:RMSNorm=4", "--step-ms", "-3")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--step-ms" in bad.stderr


def test_verify_results_drive_the_cpu_model_through_the_problem_map(tmp_path):
    """verify -> project: a problem standing for the norm module, its candidate launching one kernel."""
    from headroom.projection.problems import load_problems

    probs = tmp_path / "problems.toml"
    probs.write_text('[problem."norm_chain"]\nsuite = "test"\nselect = ["module:RMSNorm"]\n')
    res = tmp_path / "verify.json"
    res.write_text(
        json.dumps(
            {
                "problem": "norm_chain",
                "verdict": "pass",
                "speedup": 4.0,
                "launches_per_call": {"reference": 8, "candidate": 1, "method": "CUDA kernels"},
            }
        )
    )
    a = analyze(launch_bound(tmp_path))
    entries = load_speedup_file(res).entries
    r = project(a, entries, problems=load_problems(probs))
    assert r.entries[0].launches == 1 and r.entries[0].cpu["call_kind"] == "module"
    assert r.get("replay").saved_us == pytest.approx(4740.0, abs=0.5)  # as module:RMSNorm=4,launches=1


def test_cpu_only_trace_estimate_from_the_calls_cpu_time(tmp_path):
    """cpu-ops mode: no GPU timeline; a named call's inclusive CPU time shrinks and nothing waits."""
    from tests.kineto_synth import Sim

    sim = Sim()
    for s in range(3):
        t0 = sim.t
        for _ in range(10):
            sim.op("aten::mm", 30)  # 30 us of other work
            r0 = sim.t
            for _ in range(8):
                sim.op("aten::mul", 5)
                sim.idle(1)
            sim.range("user_annotation", "rmsnorm", r0, sim.t)  # 48 us a call
        sim.step(s + 1, t0, sim.t)
    a = analyze(sim.write(tmp_path / "cpu.json", step_ms=0.39))
    assert a.mode == "cpu-ops" and a.step_us == pytest.approx(780.0)
    r = project(a, [parse_cli_speedup("annotation:rmsnorm=2")])
    e = r.estimate
    # 10 calls x 48 us a step at 2x: 240 us of 780 saved; the same share of the unprofiled 390 us.
    assert r.entries[0].cpu["calls"] == 30 and r.entries[0].cpu["call_us"] == pytest.approx(30 * 48.0)
    assert e.speedup == pytest.approx(780 / 540) and e.clock == "unprofiled" and e.baseline_us == pytest.approx(1170.0)
    assert e.low < e.speedup < e.high and "CPU calls" in e.method
