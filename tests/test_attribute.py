import numpy as np

from headroom.trace.attribute import attribute_kernels_to_ops, containing_range, cpu_op_self_times
from headroom.trace.load import load_trace
from tests.conftest import hta_trace


def test_containing_range_innermost_and_outermost():
    starts = np.array([0.0, 10.0, 12.0, 50.0])
    ends = np.array([100.0, 20.0, 15.0, 60.0])
    points = np.array([5.0, 11.0, 13.0, 55.0, 200.0])
    assert containing_range(starts, ends, points).tolist() == [0, 1, 2, 3, -1]
    assert containing_range(starts, ends, points, outermost=True).tolist() == [0, 0, 0, 0, -1]


def test_nested_ops_annotations_and_steps(builder, tmp_path):
    b = builder
    b.step(7, 0, 100)
    b.cpu("my_block", 1, 60, cat="user_annotation")
    b.cpu("aten::linear", 2, 20)
    ext = b.cpu("aten::addmm", 3, 10)
    b.kernel("sm90_xmma_gemm_bf16", launch_ts=4, ts=30, dur=5, ext=ext)
    # Launch without External id: found by containment on the same thread.
    b.cpu("aten::add", 40, 5)
    b.kernel("vectorized_elementwise_kernel", launch_ts=41, ts=50, dur=1)
    # Backward thread: the step is found by time, not by thread.
    b.cpu("autograd::engine::evaluate_function: MmBackward0", 70, 10, tid=200)
    b.cpu("aten::mm", 71, 5, tid=200)
    b.kernel("nvjet_tst_128x128", launch_ts=72, ts=90, dur=4, tid=200)
    # Outside every step.
    b.cpu("aten::zeros", 150, 5)
    b.kernel("fill_kernel", launch_ts=151, ts=152, dur=1)
    ev = attribute_kernels_to_ops(load_trace(b.write(tmp_path / "t.json")))
    assert ev["op"].tolist() == ["aten::addmm", "aten::add", "aten::mm", "aten::zeros"]
    assert ev["top_op"].tolist() == [
        "aten::linear",
        "aten::add",
        "autograd::engine::evaluate_function: MmBackward0",
        "aten::zeros",
    ]
    assert ev["annotation"].tolist() == ["my_block", "my_block", "", ""]
    assert ev["step"].tolist() == [7, 7, 7, -1]
    assert ev["launch_name"].tolist() == ["cudaLaunchKernel"] * 4


def test_cuda_graph_launch_links_every_kernel_to_the_replay(builder, tmp_path):
    b = builder
    b.step(1, 0, 100)
    ext = b.cpu("CUDAGraph::replay", 1, 10)
    corr = b.kernel("k0", launch_ts=2, ts=20, dur=1, ext=ext, launch="cudaGraphLaunch")
    b.kernel("k1", launch_ts=2, ts=22, dur=1, corr=corr)
    b.kernel("k2", launch_ts=2, ts=24, dur=1, corr=corr)
    ev = attribute_kernels_to_ops(load_trace(b.write(tmp_path / "g.json")))
    # No capture in the trace: the replayed kernels have no node, so no op of their own (the graph launch's op
    # says nothing of which op made each); the replay call stays their top-level op.
    assert ev["op"].tolist() == [""] * 3 and ev["graph"].tolist() == ["unmatched"] * 3
    assert ev["top_op"].tolist() == ["CUDAGraph::replay"] * 3
    assert ev["launch_name"].tolist() == ["cudaGraphLaunch"] * 3


def test_module_paths_from_python_function_events(builder, tmp_path):
    b = builder
    b.step(1, 0, 100)
    b.cpu("nn.Module: LlamaModel_0", 1, 90, cat="python_function")
    b.cpu("nn.Module: LlamaDecoderLayer_0", 2, 40, cat="python_function")
    b.cpu("nn.Module: LlamaRMSNorm_0", 3, 10, cat="python_function")
    ext = b.cpu("aten::pow", 4, 2)
    b.kernel("pow_kernel", launch_ts=5, ts=20, dur=1, ext=ext)
    ext = b.cpu("aten::mm", 50, 2)
    b.kernel("gemm", launch_ts=51, ts=60, dur=1, ext=ext)
    ev = attribute_kernels_to_ops(load_trace(b.write(tmp_path / "m.json")))
    assert ev["module"].tolist() == ["LlamaModel_0.LlamaDecoderLayer_0.LlamaRMSNorm_0", "LlamaModel_0"]


def test_real_traces_link_launches():
    ev = attribute_kernels_to_ops(load_trace(hta_trace("triton_example")))
    assert ev["launch_name"].tolist() == ["cuLaunchKernel"]
    assert ev["op"].tolist() == ["triton_poi_fused_add_cos_sin_0"]
    ev = attribute_kernels_to_ops(load_trace(hta_trace("amd_trace")))
    launched = ev[ev["kind"] == "kernel"]
    assert set(launched["launch_name"]) == {"hipLaunchKernel", "hipExtModuleLaunchKernel"}
    assert (launched["op"] != "").all()
    ev = attribute_kernels_to_ops(load_trace(hta_trace("nccl_parser_config")))
    # Every kernel of that trace has a launch and an op; NCCL's is launched under record_param_comms.
    assert (ev["launch_name"] != "").mean() == 1.0
    nccl = ev[ev["name"].str.contains("ncclKernel")]
    assert len(nccl) == 21 and set(nccl["annotation"]) == {"nccl:all_reduce", "nccl:broadcast"}


def test_cpu_self_times_subtract_direct_children(builder, tmp_path):
    b = builder
    b.step(1, 0, 100)
    b.cpu("aten::linear", 0, 50)
    b.cpu("aten::t", 1, 5)
    b.cpu("aten::addmm", 10, 30)
    b.cpu("aten::copy_", 12, 4)
    ops = cpu_op_self_times(load_trace(b.write(tmp_path / "c.json"))).set_index("name")
    assert ops.loc["aten::linear", "self_us"] == 15
    assert ops.loc["aten::addmm", "self_us"] == 26
    assert ops.loc["aten::copy_", "top_op"] == "aten::linear"


def test_headroom_phase_ranges_are_frames_not_work(builder, tmp_path):
    b = builder
    b.step(1, 0, 100)
    b.cpu("headroom/forward", 0, 90, cat="user_annotation")
    b.cpu("gloo:all_reduce", 10, 30, cat="user_annotation")
    b.cpu("aten::mm", 50, 20)
    ops = cpu_op_self_times(load_trace(b.write(tmp_path / "c.json")))
    assert sorted(ops["name"]) == ["aten::mm", "gloo:all_reduce"]
    assert ops.set_index("name").loc["gloo:all_reduce", "self_us"] == 30
