import pytest

from headroom.trace.analysis import MODE_CPU, analyze, analyze_path
from headroom.errors import UserError
from tests.conftest import HTA_TRACES, hta_trace


def test_cpu_only_trace_is_classified_by_operator():
    a = analyze(hta_trace("cpu_only"))
    assert a.mode == MODE_CPU and a.num_steps == 1
    cats = a.categories.set_index("name")
    assert cats.loc["communication", "count"] == 2  # gloo:all_reduce ranges
    assert a.busy_us <= a.wall_us


def test_trace_without_steps_is_an_error_unless_whole_trace(builder, tmp_path):
    builder.kernel("gemm", launch_ts=1, ts=2, dur=3)
    p = builder.write(tmp_path / "nosteps.json")
    with pytest.raises(UserError, match="no ProfilerStep"):
        analyze(p)
    a = analyze(p, whole_trace=True)
    assert a.total_us == 3 and a.num_steps == 1


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
        "sm90_xmma_gemm": ("gemm", 1), "mystery_kernel": ("other", 1)}


def test_directory_of_traces():
    analyses = analyze_path(HTA_TRACES) if HTA_TRACES.exists() else pytest.skip("no shared traces")
    assert len(analyses) == 6
