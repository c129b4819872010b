import numpy as np
import pytest

from headroom.trace.accounting import overlap_shares, union_length
from headroom.trace.analysis import analyze
from tests.conftest import hta_trace


def test_overlap_shares_split_each_instant_evenly():
    s = np.array([0.0, 5.0, 20.0])
    e = np.array([10.0, 15.0, 21.0])
    assert overlap_shares(s, e).tolist() == [7.5, 7.5, 1.0]
    assert union_length(s, e) == 16.0


def test_union_matches_brute_force_on_random_intervals():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 1000, 300).astype(float)
    e = s + rng.integers(0, 50, 300)
    grid = np.zeros(1100, dtype=bool)
    for a, b in zip(s.astype(int), e.astype(int)):
        grid[a:b] = True
    assert union_length(s, e) == grid.sum()
    assert overlap_shares(s, e).sum() == pytest.approx(grid.sum())


def test_two_overlapping_streams_are_not_double_counted(builder, tmp_path):
    b = builder
    b.step(1, 0, 50)
    b.kernel("sm90_xmma_gemm", launch_ts=1, ts=10, dur=20, stream=7)  # 10..30
    b.kernel("vectorized_elementwise_kernel<Functor>", launch_ts=2, ts=20, dur=20, stream=8)  # 20..40
    b.kernel("Memset (Device)", launch_ts=3, ts=60, dur=10, stream=7, kind="memset")  # 60..70, still launched in step 1
    a = analyze(b.write(tmp_path / "t.json"))
    assert a.total_us == 50 and a.busy_us == 40 and a.wall_us == 70 and a.idle_us == 30
    cats = a.categories.set_index("name")
    assert cats.loc["gemm", "us"] == 20 and cats.loc["gemm", "wall_us"] == 15
    assert cats.loc["elementwise", "wall_us"] == 15 and cats.loc["memory", "wall_us"] == 10
    assert cats["wall_fraction"].sum() == pytest.approx(40 / 70)
    assert cats["fraction"].sum() == pytest.approx(1.0)
    assert a.addressable_us == 20 and a.addressable_fraction == pytest.approx(0.4)


def test_per_step_breakdown_and_window(builder, tmp_path):
    b = builder
    b.step(1, 0, 100)
    b.step(2, 100, 100)
    b.kernel("gemm", launch_ts=5, ts=10, dur=30)
    b.kernel("softmax", launch_ts=105, ts=110, dur=10)
    b.kernel("layer_norm", launch_ts=199, ts=205, dur=10)  # launched in step 2, ends after it
    b.kernel("gemm", launch_ts=250, ts=260, dur=100)  # outside the steps: not counted
    a = analyze(b.write(tmp_path / "t.json"))
    assert a.num_steps == 2 and a.window == (0.0, 215.0)
    assert a.total_us == 50 and a.step_us == pytest.approx(107.5)
    s = a.steps.set_index("step")
    assert s.loc[1, "total_us"] == 30 and s.loc[2, "total_us"] == 20 and s.loc[2, "wall_us"] == 115
    assert s.loc[2, "addressable_us"] == 20


@pytest.mark.parametrize("name", ["nccl_parser_config", "timeline_analysis", "amd_trace", "base__base"])
def test_category_sums_equal_total_on_real_traces(name):
    a = analyze(hta_trace(name))
    assert a.categories["us"].sum() == pytest.approx(a.total_us)
    assert a.events["dur"].sum() == pytest.approx(a.total_us)
    assert a.categories["wall_us"].sum() == pytest.approx(a.busy_us, rel=1e-6)
    # Relative timestamps near 4e12 us carry ~1e-3 us of float rounding per endpoint.
    assert a.busy_us <= a.total_us + 0.01 and a.busy_us <= a.wall_us * a.n_devices + 0.01
    assert a.idle_us == pytest.approx(a.wall_us * a.n_devices - a.busy_us)
    assert a.steps["total_us"].sum() == pytest.approx(a.total_us)


def test_recommender_trace_numbers():
    # fbgemm TBE + NCCL send/recv training step (HTA's sampled rank-0 trace, A100).
    a = analyze(hta_trace("timeline_analysis"))
    cats = a.categories.set_index("name")
    assert a.num_steps == 2
    assert cats.loc["communication", "us"] == 396199.0
    assert cats.loc["embedding", "us"] > 10000  # TBE forward/backward incl. its sorts
    ev = a.events
    tbe = ev[ev["name"].str.contains("split_embedding")]
    assert len(tbe) > 0 and set(tbe["category"]) == {"embedding"}
    assert set(ev.loc[ev["name"].str.contains("permute_2D_lengths"), "category"]) == {"indexing"}


def test_gpu_work_launched_before_recording_is_neither_step_work_nor_idle(builder, tmp_path):
    # Eager PyTorch runs ahead of the GPU: when ProfilerStep#2 starts on the CPU (t=0) the GPU
    # is still running a kernel launched in the un-recorded warm-up step (its launch is absent).
    b = builder
    b.step(2, 0, 20)
    b.step(3, 20, 20)
    b.events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "leftover_gemm",
            "pid": 0,
            "tid": 7,
            "ts": 0.0,
            "dur": 50.0,
            "args": {"device": 0, "stream": 7, "correlation": 999999},
        }
    )
    b.kernel("sm90_xmma_gemm", launch_ts=5, ts=50, dur=30)  # step 2: waits for the leftover
    b.kernel("softmax_kernel", launch_ts=25, ts=80, dur=30)  # step 3
    a = analyze(b.write(tmp_path / "t.json"))
    assert "leftover_gemm" not in set(a.events["name"])
    assert a.window == (50.0, 110.0) and a.busy_us == 60 and a.idle_us == 0
    s = a.steps.set_index("step")
    assert (s.loc[2, "start"], s.loc[2, "end"]) == (50.0, 80.0)
    assert (s.loc[3, "start"], s.loc[3, "end"]) == (80.0, 110.0)
    assert a.steps["wall_us"].sum() == a.wall_us
