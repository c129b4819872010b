import pytest

from headroom.errors import UserError
from headroom.trace.analysis import MODE_CPU, analyze, analyze_path
from tests.conftest import HTA_TRACES, hta_trace


def test_cpu_only_trace_is_classified_by_operator():
    a = analyze(hta_trace("cpu_only"))
    assert a.mode == MODE_CPU and a.num_steps == 1
    cats = a.categories.set_index("name")
    assert cats.loc["communication", "count"] == 2  # gloo:all_reduce ranges
    assert a.busy_us <= a.wall_us


def test_trace_without_steps_is_analysed_whole_and_says_so(builder, tmp_path):
    # A plain `with torch.profiler.profile():` block has no ProfilerStep ranges: it used to be refused.
    builder.kernel("gemm", launch_ts=1, ts=2, dur=3)
    builder.kernel("vectorized_elementwise_kernel", launch_ts=6, ts=7, dur=1)
    p = builder.write(tmp_path / "nosteps.json")
    a = analyze(p)
    assert a.basis == "whole trace" and a.num_steps == 1
    assert a.total_us == 4 and a.wall_us == 6 and a.idle_us == 2  # from the first kernel start to the last end
    assert len(a.notes) == 1 and a.notes[0].startswith("no ProfilerStep ranges: analysing the whole trace")
    w = analyze(p, whole_trace=True)
    assert w.total_us == 4 and w.notes == []


def test_window_picks_steps_by_a_range_name(builder, tmp_path):
    # vLLM-style: no ProfilerStep, one `execute_model` range per engine step; work between them is left out.
    for _k, t0 in enumerate((0, 100, 200)):
        builder.cpu("execute_model", t0, 50, cat="user_annotation")
        builder.cpu("execute_model_inner", t0 + 5, 10, cat="user_annotation")  # nested: part of the step
        builder.kernel("sm90_xmma_gemm", launch_ts=t0 + 6, ts=t0 + 10, dur=20)
        builder.kernel("vectorized_elementwise_kernel", launch_ts=t0 + 70, ts=t0 + 75, dur=5)  # outside
    p = builder.write(tmp_path / "vllm.json")
    a = analyze(p, window="^execute_model$")
    assert a.num_steps == 3 and list(a.steps["step"]) == [0, 1, 2]
    assert a.total_us == 60 and set(a.events["category"]) == {"gemm"}
    assert a.basis == "3 range(s) matching '^execute_model$'" and a.notes == []
    assert analyze(p, window="EXECUTE_MODEL").num_steps == 3  # case-insensitive, outermost ranges only
    with pytest.raises(UserError, match="--window 'prefill' matches no CPU range"):
        analyze(p, window="prefill")
    with pytest.raises(UserError, match="--window: bad regex"):
        analyze(p, window="(")
    with pytest.raises(UserError, match="not both"):
        analyze(p, window="execute_model", whole_trace=True)


def test_short_repr_and_tables_keyed_by_name(builder, tmp_path):
    builder.step(1, 0, 10)
    builder.kernel("sm90_xmma_gemm", launch_ts=1, ts=2, dur=4)
    builder.kernel("mystery_kernel", launch_ts=2, ts=6, dur=2)
    a = analyze(builder.write(tmp_path / "t.json"))
    assert repr(a) == ("Analysis('t.json', gpu, 1 step(s), step 0.010 ms, idle 40.0%, addressable 33.3% of 0.006 ms)")
    assert a.categories.loc["gemm", "us"] == 4 and a.categories["name"].tolist() == ["gemm", "other"]
    assert a.kernels.loc["mystery_kernel", "category"] == "other"
    assert a.ops.loc["(no op)", "count"] == 2 and a.steps.loc[1, "total_us"] == 6


def test_to_dict_contract(builder, tmp_path):
    builder.step(1, 0, 10)
    builder.kernel("sm90_xmma_gemm", launch_ts=1, ts=2, dur=4)
    builder.kernel("mystery_kernel", launch_ts=2, ts=6, dur=2)
    d = analyze(builder.write(tmp_path / "t.json")).to_dict(all_kernels=True)
    for key in ("total_us", "busy_us", "idle_us", "wall_us", "addressable_fraction", "categories", "kernels"):
        assert key in d
    assert d["total_us"] == 6 and d["addressable_fraction"] == pytest.approx(2 / 6)
    assert {c["name"]: c["addressable"] for c in d["categories"]} == {"gemm": False, "other": True}
    assert d["unknown"] == [{"name": "mystery_kernel", "us": 2.0, "count": 1}]
    assert {k["name"]: (k["category"], k["count"]) for k in d["kernels"]} == {
        "sm90_xmma_gemm": ("gemm", 1),
        "mystery_kernel": ("other", 1),
    }


def test_directory_of_traces():
    analyses = analyze_path(HTA_TRACES) if HTA_TRACES.exists() else pytest.skip("no shared traces")
    assert len(analyses) == 6


def test_a_dropped_middle_step_is_left_out_not_counted_as_idle(builder, tmp_path):
    for n, t0 in ((1, 0.0), (2, 100.0), (3, 200.0)):
        builder.step(n, t0, 100.0 if n != 2 else -1.0)  # the middle step's dur is impossible
        builder.kernel("sm90_gemm", launch_ts=t0 + 2, ts=t0 + 10, dur=50)
    p = builder.write(tmp_path / "t.json")
    a = analyze(p, lenient=True, use_cache=False)
    assert a.num_steps == 2 and a.busy_us == 100.0
    assert a.wall_us == 200.0 and a.idle_us == 100.0  # was 300 and 200: the dropped step's time as idle
    assert a.notes == [
        "1 step(s) missing between the others (ProfilerStep#2): their 0.100 ms are left out of "
        "the analysed time, not counted as idle"
    ]


def test_whole_trace_is_one_step(builder, tmp_path):
    for n, t0 in ((1, 0.0), (2, 100.0), (3, 200.0)):
        builder.step(n, t0, 100.0)
        builder.kernel("sm90_gemm", launch_ts=t0 + 2, ts=t0 + 10, dur=50)
    p = builder.write(tmp_path / "t.json")
    w = analyze(p, whole_trace=True, use_cache=False)
    assert w.num_steps == 1 and w.step_us == w.wall_us == 260.0  # from the first step's start to the last kernel's end
    assert analyze(p, use_cache=False).num_steps == 3
