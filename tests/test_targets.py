"""`headroom targets`: ranking ops and modules by end-to-end gain; the tables behind the figures."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import typer
from conftest import SHIPPED_TRACES, hta_trace
from typer.testing import CliRunner

from headroom.errors import UserError
from headroom.projection.amdahl import amdahl
from headroom.projection.baseline import Baseline
from headroom.projection.matching import select
from headroom.projection.targets import targets, targets_dict
from headroom.report.scaling import scaling_table
from headroom.report.tables import addressable_summary, category_fractions
from headroom.trace.analysis import analyze


@pytest.fixture
def base() -> Baseline:
    df = pd.DataFrame(
        {
            "name": ["gemm_a", "ln_fwd", "gemm_b", "ln_fwd", "add"],
            "op": ["aten::mm", "aten::native_layer_norm", "aten::mm", "aten::native_layer_norm", ""],
            "top_op": ["aten::linear", "aten::layer_norm", "aten::linear", "aten::layer_norm", ""],
            "module": [
                "M_0.Layer_0.Linear_0",
                "M_0.Layer_0.LayerNorm_0",
                "M_0.Layer_1.Linear_1",
                "M_0.Layer_1.LayerNorm_1",
                "",
            ],
            "category": ["gemm", "normalization", "gemm", "normalization", "elementwise"],
            "addressable": [False, True, False, True, True],
            "ts": [0.0, 100.0, 130.0, 230.0, 260.0],
            "dur": [100.0, 30.0, 100.0, 30.0, 20.0],
            "launch_ts": [-10.0] * 5,
            "stream": 7,
            "device": 0,
            "kind": "kernel",
        }
    )
    return Baseline.from_events(df, window=(0.0, 300.0))


def test_ranking_and_hand_computed_gains(base):
    t = targets(base, speedup=2.0, by=("op",))
    assert t["name"].tolist() == ["aten::mm", "aten::native_layer_norm", "(no op)"]
    mm = t.iloc[0]
    # aten::mm: 200 us of a 300 us window; at 2x saves 100 -> gain 1/3; at infinity saves 200 -> 2/3.
    assert mm.gain == pytest.approx(1 / 3) and mm.gain_inf == pytest.approx(2 / 3)
    assert mm.projected_us == pytest.approx(200.0) and mm.kernels == 2
    assert (mm.category, mm.addressable, mm.share) == ("gemm", "no", pytest.approx(200 / 280))
    ln = t.iloc[1]
    assert ln.gain == pytest.approx(30 / 300) and ln.addressable == "yes"
    # The same numbers as a direct Amdahl projection of that op.
    assert ln.projected_us == pytest.approx(
        amdahl(base, 2.0, select(base.events, "op:aten::native_layer_norm")).projected_us
    )


def test_modules_grouped_across_layers(base):
    # A table with only torch.profiler(with_modules=True) paths: the class is the last part.
    t = targets(base, speedup=1.5, by=("module",))
    assert t["name"].tolist() == ["Linear", "LayerNorm"]
    assert t.iloc[0].kernels == 2 and t.iloc[0].us == 200.0
    inst = targets(base, speedup=1.5, by=("module_path",))
    assert inst["name"].tolist()[:2] == ["M_0.Layer_0.Linear_0", "M_0.Layer_1.Linear_1"]


def test_partly_addressable_and_replay_columns(base):
    ev = base.events.copy()
    ev.loc[4, "op"] = "aten::native_layer_norm"  # now the op is 60 us addressable + ... all addressable
    ev.loc[0, "op"] = "aten::native_layer_norm"  # and 100 us of gemm under it: partly
    b = Baseline.from_events(ev, window=(0.0, 300.0))
    t = targets(b, speedup=1.5, by=("op",), replay_top=1)
    row = t.iloc[0]
    assert row.addressable == "partly" and row.addressable_fraction == pytest.approx(80 / 180)
    assert "replay_gain" in t.columns and math.isfinite(row.replay_gain) and np.isnan(t.iloc[-1].replay_gain)


def test_bad_speedup_and_grouping(base):
    with pytest.raises(UserError):
        targets(base, speedup=0)
    with pytest.raises(UserError):
        targets(base, by=("layer",))


def test_targets_on_real_trace_and_json():
    a = analyze(hta_trace("nccl_parser_config"))
    t = targets(a, speedup=1.5, top=10)
    assert set(t["kind"]) == {"op"}  # this trace has no module ranges
    ops = t[t["kind"] == "op"]
    assert ops["gain"].is_monotonic_decreasing
    assert (ops["gain_inf"] >= ops["gain"]).all()
    d = json.loads(json.dumps(targets_dict(a, t, 1.5)))
    assert d["baseline_us"] == pytest.approx(a.wall_us) and d["speedup"] == 1.5
    assert {"kind", "name", "category", "addressable", "kernels", "share", "gain", "gain_inf"} <= set(d["targets"][0])


def test_targets_cli():
    from headroom.cli.project import register

    app = typer.Typer()
    register(app)
    r = CliRunner().invoke(app, ["targets", str(hta_trace("timeline_analysis")), "--json", "--replay-top", "2"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["targets"][0]["replay_gain"] is not None
    r = CliRunner().invoke(app, ["targets", str(hta_trace("timeline_analysis")), "--top", "3"])
    assert r.exit_code == 0 and "by op" in r.stdout


# --- figure tables --------------------------------------------------------------------------


def test_category_fractions_match_analysis():
    a = analyze(hta_trace("nccl_parser_config"))
    df = category_fractions([a], ["resnet"])
    assert df["fraction"].sum() == pytest.approx(1.0)
    assert df.loc[df["addressable"], "fraction"].sum() == pytest.approx(a.addressable_fraction)
    # non-addressable first, then addressable, each largest first
    assert df["addressable"].tolist() == sorted(df["addressable"].tolist())
    s = addressable_summary([a], ["resnet"])
    assert s.loc[0, "addressable_fraction"] == pytest.approx(a.addressable_fraction)
    w = category_fractions([a], ["resnet"], basis="wall")
    assert w["fraction"].sum() == pytest.approx(1.0) and "idle" in set(w["category"])


def _fake(addr: float, params=None, family="llama"):
    cats = pd.DataFrame(
        {
            "name": ["gemm", "attention", "elementwise"],
            "us": [60.0 * (1 - addr), 40.0 * (1 - addr), 100.0 * addr],
            "addressable": [False, False, True],
        }
    )
    return SimpleNamespace(
        categories=cats,
        total_us=100.0,
        addressable_fraction=addr,
        source=f"{family}-{params}.json",
        manifest={"params": params, "family": family} if params else {},
    )


def test_scaling_table_from_manifest_and_override():
    t = scaling_table([_fake(0.2, 7e9), _fake(0.35, 1e9)])
    assert t["params"].tolist() == [1e9, 7e9] and t["addressable_fraction"].tolist() == [0.35, 0.2]
    assert t["gemm_attention_fraction"].tolist() == pytest.approx([0.65, 0.8])
    assert t["family"].tolist() == ["llama", "llama"]
    t = scaling_table([_fake(0.2), _fake(0.3)], params=[2, 1], labels=["b", "a"], family="x")
    assert t["workload"].tolist() == ["a", "b"]
    with pytest.raises(UserError, match="parameter count"):
        scaling_table([_fake(0.2)])


# --- by module: a synthetic trace with a known answer ----------------------------


def _module_trace(b, path):
    """One step (0-1000 us). Modules: model (Net) [10, 500] > model.block (Block) [20, 300] >
    model.block.a (Linear) [30, 100] and model.block.b (Linear) [150, 220]. GPU (serial):
    gemm_a 100 us (in a), gemm_b 60 (in b), add 40 (in block), relu 20 (in model), the backward
    of a's mm 50 (autograd thread, linked to a's mm by a fwdbwd flow), an optimizer kernel 30."""
    b.step(1, 0, 1000)
    b.cpu("headroom/module model (Net)", 10, 490, args={"Input Dims": [[4, 8]], "Input type": ["float"]})
    b.cpu("headroom/module model.block (Block)", 20, 280)
    b.cpu(
        "headroom/module model.block.a (Linear)",
        30,
        70,
        args={"Input Dims": [[4, 8], []], "Input type": ["c10::BFloat16", "Scalar"]},
    )
    ext = b.cpu("aten::mm", 40, 10)
    b.kernel("gemm_a", launch_ts=41, ts=100, dur=100, ext=ext)
    b.cpu(
        "headroom/module model.block.b (Linear)",
        150,
        70,
        args={"Input Dims": [[4, 8]], "Input type": ["c10::BFloat16"]},
    )
    ext = b.cpu("aten::mm", 160, 10)
    b.kernel("gemm_b", launch_ts=161, ts=200, dur=60, ext=ext)
    ext = b.cpu("aten::add", 250, 10)
    b.kernel("vectorized_elementwise_kernel<add>", launch_ts=251, ts=260, dur=40, ext=ext)
    ext = b.cpu("aten::relu", 400, 10)
    b.kernel("vectorized_elementwise_kernel<relu>", launch_ts=401, ts=420, dur=20, ext=ext)
    b.cpu("MmBackward0", 600, 50, tid=200)
    ext = b.cpu("aten::mm", 610, 20, tid=200)
    b.kernel("gemm_bwd", launch_ts=611, ts=620, dur=50, ext=ext, tid=200)
    b.fwdbwd(1, forward_ts=40, backward_ts=600, backward_tid=200)
    ext = b.cpu("aten::_foreach_add_", 700, 10)
    b.kernel("multi_tensor_apply_kernel", launch_ts=701, ts=700, dur=30, ext=ext)
    return analyze(b.write(path))


def test_by_module_numbers_on_a_synthetic_trace(builder, tmp_path):
    a = _module_trace(builder, tmp_path / "m.json")
    assert a.wall_us == 1000.0 and a.total_us == 300.0  # the window is the step
    t = targets(a, speedup=2.0, by=("module",), replay_top=0).set_index("name")
    assert t.index.tolist() == ["Linear", "Block", "Net"]
    lin = t.loc["Linear"]
    # 100 + 60 forward + 50 backward (the flow links gemm_bwd to a's mm): 210 of 300 us, 3 kernels.
    assert (lin.us, lin.kernels, lin.share) == (210.0, 3, pytest.approx(0.7))
    assert (lin.calls, lin.kernels_per_call, lin.cpu_us_per_call) == (2.0, 1.5, 70.0)
    assert lin.gain == pytest.approx(105 / 1000) and lin.gain_inf == pytest.approx(210 / 1000)
    assert lin.phases == {"forward": pytest.approx(160 / 210), "backward": pytest.approx(50 / 210)}
    assert lin.inputs == [{"inputs": "bf16[4,8]", "calls": 2}]  # scalars are not tensor shapes
    blk = t.loc["Block"]
    # Block's own CPU time: 280 us less its two Linear calls of 70.
    assert (blk.us, blk.calls, blk.cpu_us_per_call, blk.inputs) == (40.0, 1.0, 140.0, [])
    assert t.loc["Net"].us == 20.0 and t.loc["Net"].cpu_us_per_call == 210.0
    assert t.loc["Net"].inputs == [{"inputs": "f32[4,8]", "calls": 1}]
    # total: a module holds the kernels of the modules inside it (the optimizer kernel is nobody's).
    tot = targets(a, speedup=2.0, by=("module",), scope="total").set_index("name")
    assert tot["us"].to_dict() == {"Net": 270.0, "Block": 250.0, "Linear": 210.0}
    assert tot.loc["Block", "cpu_us_per_call"] == 280.0
    assert tot.loc["Net", "categories"] == {"gemm": pytest.approx(210 / 270), "elementwise": pytest.approx(60 / 270)}
    inst = targets(a, speedup=2.0, by=("module_path",)).set_index("name")
    assert inst["us"].to_dict() == {"model.block.a": 150.0, "model.block.b": 60.0, "model.block": 40.0, "model": 20.0}
    assert inst.loc["model.block.a", "kernels_per_call"] == 2.0
    assert targets(a, by=("module_path",), scope="total").set_index("name").loc["model.block", "us"] == 250.0


def test_by_module_replay_and_json(builder, tmp_path):
    a = _module_trace(builder, tmp_path / "m.json")
    t = targets(a, speedup=2.0, by=("op", "module"), replay_top=1)
    mod = t[t["kind"] == "module"].iloc[0]
    # Serial kernels, no idle gap the speedup could fall into except the backward's:
    # replay at infinity removes gemm_a, gemm_b and gemm_bwd entirely.
    assert mod["name"] == "Linear" and math.isfinite(mod.replay_gain) and mod.replay_gain <= mod.replay_gain_inf
    d = targets_dict(a, t, 2.0)
    rows = {(r["kind"], r["name"]): r for r in d["targets"]}
    assert rows[("module", "Linear")]["calls"] == 2.0 and rows[("module", "Linear")]["scope"] == "self"
    assert "calls" not in rows[("op", "aten::mm")]  # op rows keep the op contract
    json.dumps(d)


def test_module_selector_holds_children_and_backward(builder, tmp_path):
    ev = _module_trace(builder, tmp_path / "m.json").events
    assert ev.loc[select(ev, "module:Block"), "dur"].sum() == 250.0
    assert ev.loc[select(ev, r"module:^model\.block\.a$"), "dur"].sum() == 150.0
    assert ev.loc[select(ev, r"module:^model\.block\.a$ & phase:forward"), "dur"].sum() == 100.0
    assert ev.set_index("name").loc["gemm_bwd", "phase"] == "backward"


def test_no_module_ranges_is_said_on_stderr(headroom):
    path = SHIPPED_TRACES / "llama-7b.infer.prefill.compile.json.gz"  # the shipped trace without module ranges
    p = headroom("targets", path, "--by", "module", "--json")
    code, out, err = p.returncode, p.stdout, p.stderr.splitlines()
    assert code == 0
    assert len(err) == 1 and "has no nn.Module ranges" in err[0] and "headroom profile" in err[0]
    assert err[0].startswith("headroom: warning: llama-7b.infer.prefill.compile.json.gz has no nn.Module ranges")
    d = json.loads(out)
    assert d["schema"] == "headroom.targets/1"
    assert d["targets"] == [] and d["notes"] == [err[0].removeprefix("headroom: warning: ")]
    p = headroom("targets", path, "--scope", "inner")  # a choice: listed in --help
    code, out, err = p.returncode, p.stdout, p.stderr.splitlines()
    assert code == 2 and out == "" and len(err) == 1
    assert err[0].startswith("headroom: error: ") and "'inner' is not one of 'self', 'total'" in err[0]
    with pytest.raises(UserError, match="unknown module scope 'inner'"):  # the API checks it too
        targets(analyze(path), by=("module",), scope="inner")


def test_module_rows_on_screen_are_per_step(builder, tmp_path, headroom):
    """`targets --by module` printed window totals in its `ms` column; now ms per step, as every screen."""
    for k in (1, 2):  # two steps, one Linear call with a 100 us GEMM in each
        t0 = (k - 1) * 1000
        builder.step(k, t0, 1000)
        builder.cpu("headroom/module model (Net)", t0 + 10, 490)
        builder.cpu("headroom/module model.fc (Linear)", t0 + 20, 100)
        ext = builder.cpu("aten::mm", t0 + 30, 10)
        builder.kernel("gemm_a", launch_ts=t0 + 31, ts=t0 + 100, dur=100, ext=ext)
    path = builder.write(tmp_path / "two.json")
    p = headroom("targets", path, "--by", "module", "--replay-top", "0")
    code, out, err = p.returncode, p.stdout, p.stderr
    assert code == 0 and err == ""
    assert "measured 1.000 ms/step over 2 step(s)" in out
    row = next(ln for ln in out.splitlines() if ln.lstrip().startswith("Linear"))
    cells = [c.strip() for c in row.split("│")]
    assert cells[1:3] == ["1", "1.0"]  # calls/step, kernels/call
    assert cells[4] == "0.100"  # ms/step: 100 us per step (the 2-step total is 0.200)


def test_targets_on_a_cached_trace_read_only_the_tables_the_replay_uses(tmp_path, monkeypatch):
    """The baseline's trace tables are read on first use: targets (with replays) on a cached trace reads
    the runtime calls and syncs, not the CPU ranges, and ranks exactly as on the trace loaded afresh."""
    from headroom.trace import cache

    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HEADROOM_CACHE_MIN_BYTES", "0")
    p = tmp_path / "resnet.json.gz"
    p.write_bytes((SHIPPED_TRACES / "resnet-50.train.json.gz").read_bytes())
    fresh = targets(analyze(p, use_cache=False), replay_top=3)
    analyze(p)  # fills the cache
    reads: list[str] = []
    read = cache.StoredTables.read
    monkeypatch.setattr(cache.StoredTables, "read", lambda self, t: reads.append(t) or read(self, t))
    cached = targets(analyze(p), replay_top=3)
    assert sorted(reads) == ["launches", "syncs"]
    assert cached["replay_gain"].notna().sum() >= 3
    pd.testing.assert_frame_equal(cached, fresh)
    b = Baseline.from_analysis(analyze(p))
    assert len(b.cpu) == len(analyze(p, use_cache=False).trace.cpu)  # read when asked for


def test_rows_of_missing_names_or_categories_group_nothing():
    """A kernel with no name joins no kernel row and one with no category gives its row none (pandas' groupby
    drops a missing key: the codes targets groups by keep that). k1's time: 3 us gemm, 5 us with no category."""
    ev = pd.DataFrame(
        {
            "name": pd.Series(["k1", None, "k1", "k2", "k3"], dtype="str"),
            "op": pd.Series(["aten::mm", "aten::mm", "", "aten::add", "aten::add"], dtype="str"),
            "category": pd.Series(["gemm", "gemm", None, "elementwise", None], dtype="str"),
            "dur": [3.0, 7.0, 5.0, 2.0, 1.0],
            "wall_us": [3.0, 7.0, 5.0, 2.0, 1.0],
            "addressable": [False, False, True, True, True],
            "ts": [0.0, 10.0, 20.0, 30.0, 40.0],
            "device": [0, 0, 0, 0, 0],
        }
    )
    b = Baseline(ev, 100.0, (0.0, 100.0), 1, 1)
    kernels = targets(b, by=("kernel",), top=0).set_index("name")
    assert sorted(kernels.index) == ["k1", "k2", "k3"]
    assert kernels.loc["k1", "us"] == 8.0 and kernels.loc["k1", "kernels"] == 2
    assert kernels.loc["k1", "category"] == "gemm" and kernels.loc["k2", "category"] == "elementwise"
    assert pd.isna(kernels.loc["k3", "category"])
    ops = targets(b, by=("op",), top=0).set_index("name")
    assert ops.loc["aten::mm", "us"] == 10.0 and ops.loc["(no op)", "us"] == 5.0 and ops.loc["aten::add", "us"] == 3.0
