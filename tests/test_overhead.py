"""Profiler-overhead correction (headroom.projection.overhead; docs/projection.md, "Profiler overhead")."""

from __future__ import annotations

import pytest

from headroom.errors import UserError
from headroom.jsonio import plain
from headroom.projection.baseline import Baseline
from headroom.projection.overhead import solve_cpu_scale, unprofiled_step_us
from headroom.projection.project import project
from headroom.projection.speedups import parse_cli_speedup
from headroom.trace.analysis import analyze
from tests.kineto_synth import Sim
from tests.test_cpu_model import launch_bound, steps
from tests.test_project import shipped


def test_launch_bound_trace_is_compressed_to_the_unprofiled_step(tmp_path):
    # 1980 us/step profiled, 1188 us (60%) without the profiler.
    a = analyze(launch_bound(tmp_path, step_ms=1.188))
    u = solve_cpu_scale(Baseline.from_analysis(a), 1188.0)
    # Launch-bound: the window is the CPU's, so its clock runs at ~0.6 (the last kernel ends 6 us after
    # its launch, 9 us before the CPU's end, so a hair less: 0.6 x 5940 = 5931 s + 6).
    assert u.reached and u.cpu_scale == pytest.approx((3564 - 6) / 5931, abs=1e-4)
    assert u.baseline_us == pytest.approx(3 * 1188.0, rel=1e-6)
    assert u.overhead == pytest.approx(1980 / 1188 - 1, rel=1e-6)
    r = project(a, [parse_cli_speedup("module:RMSNorm=4,launches=1")])
    assert r.unprofiled.source == "manifest" and r.estimate.clock == "unprofiled"
    # A uniform clock keeps a launch-bound speedup (4740 of 5940 us saved) but not the GPU's latencies:
    # the last fused kernel launches 2 us into the last 10 us op (at 1192 us on the CPU clock) and ends
    # 5 + 2 us later (give or take the replay's 4 us minimum gap after the previous kernel: 0.12 us here).
    assert r.estimate.projected_us == pytest.approx(r.unprofiled.cpu_scale * 1192 + 7, abs=0.15)
    assert r.estimate.speedup == pytest.approx(r.get("replay").speedup, rel=5e-3)
    rep = plain(r.get("replay"))["unprofiled"]
    assert rep["baseline_us"] == pytest.approx(3 * 1188.0, rel=1e-6)
    assert rep["projected_us"] == pytest.approx(r.estimate.projected_us)


def _two_phase(sim: Sim) -> None:
    # A 1000 us kernel the CPU waits for, then 100 small ops the GPU waits for.
    sim.op("aten::mm", 10, [(2, "gemm_long", 1000.0)])
    sim.synchronize()
    for _ in range(100):
        sim.op("aten::add", 10, [(2, "vectorized_elementwise_kernel<add>", 1.0)])


def test_the_correction_changes_what_a_faster_kernel_buys(tmp_path):
    sim = Sim()
    steps(sim, 3, _two_phase)
    path = sim.write(tmp_path / "two_phase.json", step_ms=1.6)
    a = analyze(path)
    profiled_step = a.step_us
    # Profiled: 7 + 1000 + 4 us to the sync's return, then 1000 us of ops.
    assert profiled_step == pytest.approx(2011.0, abs=0.01)
    r = project(a, [parse_cli_speedup("kernel:gemm_long=2")])
    rep = r.get("replay")
    # 500 us per step saved on either clock: the CPU waits for that kernel.
    assert rep.saved_us / 3 == pytest.approx(500.0, abs=0.5)
    assert rep.speedup == pytest.approx(2011 / 1511, rel=1e-4)
    # Without the profiler the step is 1600 us, so the same 500 us weigh more.
    assert r.unprofiled.baseline_us == pytest.approx(3 * 1600.0, rel=1e-6)
    assert r.estimate.speedup == pytest.approx(1600 / 1100, rel=1e-3)
    assert r.get("amdahl").unprofiled.speedup == pytest.approx(1600 / 1100, rel=1e-6)
    # The CPU-only phase is what the profiler slowed: ~0.59 x its 1000 us.
    assert 0.55 < r.unprofiled.cpu_scale < 0.62


def test_step_ms_option_wins_and_is_checked(tmp_path):
    a = analyze(launch_bound(tmp_path, step_ms=1.188))
    b = Baseline.from_analysis(a)
    assert unprofiled_step_us(b) == (pytest.approx(1188.0), "manifest")
    assert unprofiled_step_us(b, 1.5) == (1500.0, "--step-ms")
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(UserError, match="--step-ms"):
            unprofiled_step_us(b, bad)
    r = project(a, [parse_cli_speedup("module:RMSNorm=4,launches=1")], step_ms=1.98)
    assert r.unprofiled.cpu_scale == pytest.approx(1.0)
    assert r.unprofiled.note == "the profiled steps are not slower than the unprofiled ones"


def test_shipped_static_cache_decode_reproduces_the_unprofiled_step():
    """Profiled at 78.11 ms/step against 38.59 ms unprofiled: the correction reproduces 38.59 ms, and
    the 90% idle is really 80%."""
    a = shipped("llama-7b.infer.decode.static-cache")
    assert a.step_us / 1e3 == pytest.approx(78.11, abs=0.01)
    u = solve_cpu_scale(Baseline.from_analysis(a), 1e3 * a.manifest["timing"]["step_ms"])
    assert u.reached and u.baseline_us / a.num_steps / 1e3 == pytest.approx(38.59, abs=0.01)
    assert u.cpu_scale == pytest.approx(0.494, abs=0.002)
    assert a.idle_fraction == pytest.approx(0.902, abs=0.001)
    assert a.to_dict()["unprofiled"]["idle_fraction"] == pytest.approx(0.802, abs=0.001)


def test_a_difference_within_run_to_run_drift_is_not_corrected(tmp_path):
    # 1% slower under the profiler: below the 2% floor (and twice the timed steps' spread).
    a = analyze(launch_bound(tmp_path, step_ms=1.96))
    r = project(a, [parse_cli_speedup("module:RMSNorm=4,launches=1")])
    assert r.unprofiled.cpu_scale == 1.0 and "within run-to-run drift (2.0%)" in r.unprofiled.note
    assert "no profiler-overhead correction: the profiled steps are 1.0% slower" in r.estimate.method
    # not corrected, but printed beside the unprofiled step: the replayed times are scaled to it, so the
    # estimate's base is that step and its ratio is of the two times printed
    assert r.estimate.clock == "unprofiled" and r.estimate.baseline_us == pytest.approx(1960.0 * a.num_steps)
    assert r.unprofiled.window_scale == pytest.approx(1960.0 * a.num_steps / r.get("replay").baseline_us)
    assert r.estimate.speedup == pytest.approx(r.estimate.baseline_us / r.estimate.projected_us)


def test_shipped_gpu_bound_training_is_not_corrected():
    # ResNet-50 training: profiled 54.77 ms/step, unprofiled 54.46 ms: 0.6%, within the timed steps' drift.
    # (Solving anyway would need a CPU 11x faster: the replayed step barely depends on the CPU there.)
    a = shipped("resnet-50.train")
    u = solve_cpu_scale(Baseline.from_analysis(a), 1e3 * a.manifest["timing"]["step_ms"])
    assert u.cpu_scale == 1.0 and "within run-to-run drift" in u.note
