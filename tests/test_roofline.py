"""The roofline of `targets` rows (`--roofline`): per-op costs from recorded shapes, device peaks, floors,
limits, fused module bounds; checked against hand-computed numbers and the shipped H200 traces."""

from __future__ import annotations

import json
import math

import pytest
from conftest import SHIPPED_TRACES, TraceBuilder

import headroom as hr
from headroom.datafiles import shipped
from headroom.errors import UserError
from headroom.projection.costs import check_table, op_cost
from headroom.projection.roofline import device_for, devices, roofline_targets
from headroom.trace.analysis import analyze
from headroom.trace.op_inputs import OpCall, Tensor


def call(name: str, *args, concrete: dict[int, str] | None = None, lists: dict[int, list[Tensor]] | None = None):
    """An OpCall from positional args: a Tensor, or None for a scalar/absent one."""
    n = len(args)
    concrete = concrete or {}
    lists = lists or {}
    return OpCall(
        name,
        tuple(a if isinstance(a, Tensor) else None for a in args),
        tuple(tuple(lists.get(i, ())) for i in range(n)),
        tuple(concrete.get(i, "") for i in range(n)),
    )


def T(dtype: str, *shape: int, strides: tuple[int, ...] = ()) -> Tensor:
    return Tensor(dtype, tuple(shape), strides)


# --- costs -------------------------------------------------------------------------------------------------


def test_the_cost_table_names_only_known_formulas():
    assert check_table(shipped("costs.toml")) == []


def test_gemm_cost():
    c = op_cost(call("aten::mm", T("bf16", 8192, 4096), T("bf16", 4096, 11008)))
    assert c.flops == 2 * 8192 * 4096 * 11008
    assert c.read == 2 * (8192 * 4096 + 4096 * 11008) and c.written == 2 * 8192 * 11008
    assert c.matrix and c.dtype == "bf16"
    addmm = op_cost(call("aten::addmm", T("f32", 768), T("f32", 512, 3072), T("f32", 3072, 768)))
    assert addmm.flops == 2 * 512 * 3072 * 768 and addmm.read == 4 * (768 + 512 * 3072 + 3072 * 768)
    bmm = op_cost(call("aten::bmm", T("f16", 12, 128, 64), T("f16", 12, 64, 128)))
    assert bmm.flops == 2 * 12 * 128 * 64 * 128 and bmm.written == 2 * 12 * 128 * 128


def test_attention_cost_and_causality():
    q = T("bf16", 4, 32, 2048, 128)
    args = [q, q, q] + [None] * 10
    full = op_cost(call("aten::_cudnn_attention_forward", *args, concrete={10: "False"}))
    causal = op_cost(call("aten::_cudnn_attention_forward", *args, concrete={10: "True"}))
    assert full.flops == 4 * 4 * 32 * 2048 * 2048 * 128 and causal.flops == full.flops / 2
    assert full.read == 3 * 2 * 4 * 32 * 2048 * 128 and full.written == 2 * 4 * 32 * 2048 * 128


def test_convolution_cost_from_its_stride_and_padding():
    # ResNet-50's stem: 224x224, 7x7 kernel, stride 2, padding 3 -> 112x112.
    c = op_cost(
        call(
            "aten::cudnn_convolution",
            T("bf16", 256, 3, 224, 224),
            T("bf16", 64, 3, 7, 7),
            None,
            None,
            None,
            None,
            concrete={2: "[3, 3]", 3: "[2, 2]", 4: "[1, 1]", 5: "1"},
        )
    )
    assert c.flops == 2 * 256 * 64 * 112 * 112 * 3 * 7 * 7
    assert c.written == 2 * 256 * 64 * 112 * 112
    back = op_cost(
        call(
            "aten::convolution_backward",
            T("bf16", 256, 64, 112, 112),
            T("bf16", 256, 3, 224, 224),
            T("bf16", 64, 3, 7, 7),
        )
    )
    assert back.flops == 2 * c.flops


def test_normalization_reduction_and_elementwise_costs():
    x = T("bf16", 4, 2048, 4096)
    ln = op_cost(call("aten::native_layer_norm", x, None, T("bf16", 4096), T("bf16", 4096)))
    assert ln.read == 2 * (4 * 2048 * 4096 + 2 * 4096) and ln.written == 2 * 4 * 2048 * 4096
    mean = op_cost(call("aten::mean", T("f32", 4, 2048, 4096), None, None, concrete={1: "[-1]", 2: "True"}))
    assert mean.read == 4 * 4 * 2048 * 4096 and mean.written == 4 * 4 * 2048
    # A 0-dim f64 tensor (a Python number) does not make the bf16 product f64.
    mul = op_cost(call("aten::mul", x, T("f64")))
    assert mul.written == 2 * 4 * 2048 * 4096 and mul.read == 2 * 4 * 2048 * 4096 + 8
    # f32 * bf16 broadcast over the last dimension: the f32 result.
    w = op_cost(call("aten::mul", T("bf16", 4096), T("f32", 4, 2048, 4096)))
    assert w.written == 4 * 4 * 2048 * 4096
    inplace = op_cost(call("aten::add_", T("f32", 10, 10), T("f32", 10)))
    assert inplace.written == 400 and inplace.read == 440
    silu = op_cost(call("aten::silu", T("bf16", 1000)))
    assert silu.flops == 5 * 1000  # the table's FLOPs per element


def test_embedding_bag_gather_and_expanded_views():
    bag = op_cost(
        call(
            "aten::_embedding_bag",
            T("f32", 1000, 64),
            T("i64", 300),
            T("i64", 101),
            None,
            None,
            None,
            None,
            None,
            concrete={7: "True"},
        )
    )
    assert bag.read == 300 * 8 + 101 * 8 + 300 * 64 * 4 and bag.written == 100 * 64 * 4 and bag.flops == 300 * 64
    # An index expanded over its last dimension (stride 0) holds 8192 ints, not 8192 x 4096.
    g = op_cost(call("aten::gather", T("bf16", 32000, 4096), None, T("i64", 8192, 4096, strides=(1, 0))))
    assert g.read == 8192 * 8 + 2 * 8192 * 4096 and g.written == 2 * 8192 * 4096
    cat = op_cost(call("aten::cat", None, None, lists={0: [T("bf16", 2, 3), T("bf16", 2, 5)]}))
    assert cat.read == cat.written == 2 * 16


def test_an_op_without_a_formula_has_no_cost():
    assert op_cost(call("aten::nonexistent", T("f32", 4))) is None
    assert op_cost(call("aten::mm", T("f32", 4), None)) is None  # inputs that do not fit the formula


# --- devices -------------------------------------------------------------------------------------------------


def test_the_device_table():
    d = devices()
    assert {"h200", "h100", "a100", "cpu"} <= set(d)
    h200 = device_for("NVIDIA H200")
    assert (h200.memory_tb_s, dict(h200.matrix)["bf16"]) == (4.8, 989.0)
    assert device_for("NVIDIA H100 80GB HBM3").key == "h100" and device_for("NVIDIA A100-SXM4-80GB").key == "a100"
    assert not device_for("").peaks and not device_for("cpu").peaks
    with pytest.raises(UserError, match="did you mean 'h200'"):
        device_for("x", "h20")
    with pytest.raises(UserError, match="--peaks"):
        device_for("Some Other GPU")


# --- a synthetic trace with known shapes and times -----------------------------------------------------------

M, K, N = 4096, 4096, 4096
MM_US = 200.0
ADD_US = 150.0
TINY_US = 3.0


@pytest.fixture
def toy(tmp_path):
    b = TraceBuilder()
    dims = {
        "Input Dims": [[M, K], [K, N]],
        "Input type": ["c10::BFloat16", "c10::BFloat16"],
        "Input Strides": [[K, 1], [N, 1]],
        "Concrete Inputs": ["", ""],
    }
    add = {
        "Input Dims": [[M, N], [M, N], []],
        "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"],
        "Concrete Inputs": ["", "", "1"],
    }
    tiny = {"Input Dims": [[16], []], "Input type": ["float", "Scalar"], "Concrete Inputs": ["", "2"]}
    for k in range(2):
        t0 = 1000.0 * k
        b.step(k + 1, t0, 900.0)
        e = b.cpu("aten::mm", t0 + 1, 4.0, args=dims)
        b.kernel("gemm", t0 + 2, t0 + 10, MM_US, ext=e)
        e = b.cpu("aten::add", t0 + 6, 4.0, args=add)
        b.kernel("add", t0 + 7, t0 + 10 + MM_US, ADD_US, ext=e)
        e = b.cpu("aten::pow", t0 + 11, 4.0, args=tiny)
        b.kernel("pow", t0 + 12, t0 + 10 + MM_US + ADD_US, TINY_US, ext=e)
    return b.write(
        tmp_path / "toy.json",
        headroom={"workload": "toy", "dtype": "bfloat16"},
        deviceProperties=[{"name": "NVIDIA H200"}],
    )


def test_rows_of_a_known_trace(toy):
    t = hr.targets(toy, speedup=2.0, by=["op"], roofline=True).to_frame().set_index("name")
    mm, add, pow_ = t.loc["aten::mm"], t.loc["aten::add"], t.loc["aten::pow"]
    flops = 2.0 * M * K * N
    moved = 2.0 * (M * K + K * N + M * N)
    # Two calls in the window; achieved rates from the kernels' own 200 us.
    assert mm["flops"] == 2 * flops and mm["bytes"] == 2 * moved and mm["op_calls"] == 2
    assert mm["bytes_read"] == 2 * 2.0 * (M * K + K * N) and mm["bytes_written"] == 2 * 2.0 * M * N
    assert mm["peak_tflops"] == pytest.approx(989.0)
    assert mm["compute_fraction"] == pytest.approx(flops / MM_US / 1e6 / 989.0)
    assert mm["achieved_tflops"] == pytest.approx(flops / MM_US / 1e6)  # 687 TFLOP/s
    assert mm["limit"] == "compute"
    floor = flops / 989e6  # µs at the bf16 peak
    assert mm["floor_us"] == pytest.approx(2 * floor) and mm["max_speedup"] == pytest.approx(MM_US / floor)
    add_bytes = 3 * 2.0 * M * N
    assert add["limit"] == "memory" and add["achieved_tb_s"] == pytest.approx(add_bytes / ADD_US / 1e6)
    assert add["memory_fraction"] == pytest.approx(add_bytes / ADD_US / 1e6 / 4.8)
    assert add["peak_tflops"] == pytest.approx(67.0)  # elementwise FLOPs: the f32 vector peak
    assert add["max_speedup"] == pytest.approx(ADD_US / (add_bytes / 4.8e6))
    # 16 floats: far below the shortest kernel (0.6 us): latency-bound.
    assert pow_["limit"] == "latency" and pow_["max_speedup"] == pytest.approx(TINY_US / 0.6)
    # Achievable: the gain at min(max_speedup, 2); gain_inf is the row's share of the window.
    assert add["achievable_gain"] == pytest.approx(add["gain_inf"] * (1 - 1 / min(add["max_speedup"], 2.0)))
    assert mm["achievable_gain"] == pytest.approx(mm["gain_inf"] * (1 - 1 / min(mm["max_speedup"], 2.0)))


def test_ranking_by_achievable_gain(toy):
    by_gain = hr.targets(toy, speedup=20.0, by=["op"], roofline=True).to_frame()
    by_achievable = hr.targets(toy, speedup=20.0, by=["op"], roofline=True, rank_by="achievable").to_frame()
    assert by_gain["name"].tolist()[0] == "aten::mm"
    gains = by_achievable["achievable_gain"].tolist()
    assert gains == sorted(gains, reverse=True)
    # mm (200 us) is held to 1.45x by its compute floor: 61 us saved; add (150 us, a 21 us floor): 129 us.
    assert by_achievable["name"].tolist()[0] == "aten::add"


def test_op_inputs_are_read_only_for_the_roofline(toy, monkeypatch, headroom):
    import headroom.projection.roofline as roofline_module

    def refuse(*a, **k):
        raise AssertionError("op inputs read without --roofline")

    monkeypatch.setattr(roofline_module, "op_calls", refuse)
    assert headroom("targets", toy, "--no-cache").returncode == 0
    a = analyze(toy, use_cache=False)
    ops = a.trace.cpu
    assert (ops.loc[ops["cat"] == "cpu_op", "inputs"] == "").all()  # the loader decodes no op's shapes


def test_the_command_line(toy, headroom):
    r = headroom("targets", toy, "--roofline", "--json", "--by", "op")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["device"]["key"] == "h200"
    row = next(x for x in doc["targets"] if x["name"] == "aten::mm")
    assert row["limit"] == "compute" and row["fused_floor_us"] is None
    table = headroom("targets", toy, "--roofline")
    assert table.returncode == 0 and "roofline by op" in table.stdout and "compute" in table.stdout
    assert headroom("targets", toy, "--roofline", "--peaks", "a100", "--json").returncode == 0
    for bad in (
        ["--peaks", "h900", "--roofline"],
        ["--rank-by", "achievable"],
        ["--peaks", "h200"],
        ["--rank-by", "best", "--roofline"],
    ):
        r = headroom("targets", toy, *bad)
        assert r.returncode == 2 and r.stderr.count("headroom: error:") == 1, bad


def test_a_cpu_trace_has_no_peaks(tmp_path):
    b = TraceBuilder()
    b.step(1, 0.0, 100.0)
    b.cpu("aten::mm", 1.0, 50.0, args={"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]})
    path = b.write(tmp_path / "cpu.json", headroom={"workload": "toy"})
    res = hr.targets(path, by=["op"], roofline=True)
    assert res.device.key == "cpu" and any("no peaks" in n for n in res.notes)
    assert res.to_frame()["floor_us"].isna().all()


# --- the shipped H200 traces -----------------------------------------------------------------------------------


@pytest.mark.parametrize("trace", sorted(p.name for p in SHIPPED_TRACES.glob("*.json.gz")))
def test_no_row_runs_faster_than_the_device_allows(trace):
    res = roofline_targets(analyze(SHIPPED_TRACES / trace), 1.5, ("op", "module"), None)
    dev, t = res.device, res.to_frame()
    assert dev.key == "h200"
    top = max(rate for _, rate in dev.matrix)
    assert (t["achieved_tflops"].dropna() <= top).all()
    assert (t["achieved_tb_s"].dropna() <= dev.memory_tb_s).all()
    assert (t["compute_fraction"].dropna() <= 1.0).all() and (t["memory_fraction"].dropna() <= 1.0).all()
    # No floor above what was measured.
    assert (t["max_speedup"].dropna() >= 1.0).all() and (t["fused_max_speedup"].dropna() >= 1.0).all()
    # Vector ops below the f32 vector peak; matrix rows (GEMMs) below the bf16 one.
    gemm = t[(t["kind"] == "op") & t["name"].isin(["aten::mm", "aten::addmm", "aten::bmm"])]
    assert (gemm["achieved_tflops"] <= 989.0).all()


def test_llama_prefill_gemms_and_rmsnorm():
    res = roofline_targets(analyze(SHIPPED_TRACES / "llama-7b.infer.prefill.json.gz"), 1.5, ("op", "module"), None)
    t = res.to_frame().set_index(["kind", "name"])
    mm = t.loc[("op", "aten::mm")]
    # 2 x tokens x in x out per projection; Llama-7B bf16 on the H200 reaches most of the dense peak.
    assert 0.5 * 989 < mm["achieved_tflops"] < 989 and mm["limit"] == "compute" and mm["costed"] == 1.0
    attention = t.loc[("op", "aten::_cudnn_attention_forward")]
    assert 0.2 * 989 < attention["achieved_tflops"] < 989
    norm = t.loc[("module", "LlamaRMSNorm")]
    # Fused: the bf16 input read and the output written once per call, 65 calls of 4 x 2048 x 4096 per step.
    fused_bytes = 3 * 65 * 2 * (2 * 4 * 2048 * 4096)
    assert norm["fused_bytes"] == pytest.approx(fused_bytes)
    assert norm["fused_floor_us"] == pytest.approx(fused_bytes / 4.8e6, rel=1e-6)
    assert norm["fused_max_speedup"] >= 5.0 and norm["max_speedup"] < norm["fused_max_speedup"]
    assert math.isclose(norm["costed"], 1.0)


@pytest.mark.parametrize(
    "block, command",
    [
        (0, "traces/llama-7b.infer.prefill.json.gz --roofline --top 8 --replay-top 0"),
        (1, "traces/llama-7b.infer.decode.static-cache.json.gz --roofline --top 6 --replay-top 0 --by op"),
    ],
)
def test_docs_targets_shows_what_the_command_prints(headroom, block, command):
    import re

    from conftest import REPO

    doc = (REPO / "docs" / "targets.md").read_text()
    shown = re.findall(r"```\n(roofline against.*?)```", doc, re.S)[block]
    r = headroom("targets", *command.split())
    printed = r.stdout[r.stdout.index("roofline against") :]
    assert [line.rstrip() for line in printed.splitlines()] == [line.rstrip() for line in shown.splitlines()]
