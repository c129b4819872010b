"""`headroom targets`: ranking ops and modules by end-to-end gain; the tables behind the figures."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from conftest import hta_trace
from headroom.trace.analysis import analyze
from headroom.errors import UserError
from headroom.projection.amdahl import amdahl
from headroom.projection.baseline import Baseline
from headroom.projection.matching import select
from headroom.projection.targets import module_class_path, targets, targets_dict
from headroom.report.scaling import scaling_table
from headroom.report.tables import addressable_summary, category_fractions


@pytest.fixture
def base() -> Baseline:
    df = pd.DataFrame({
        "name": ["gemm_a", "ln_fwd", "gemm_b", "ln_fwd", "add"],
        "op": ["aten::mm", "aten::native_layer_norm", "aten::mm", "aten::native_layer_norm", ""],
        "top_op": ["aten::linear", "aten::layer_norm", "aten::linear", "aten::layer_norm", ""],
        "module": ["M_0.Layer_0.Linear_0", "M_0.Layer_0.LayerNorm_0", "M_0.Layer_1.Linear_1",
                   "M_0.Layer_1.LayerNorm_1", ""],
        "category": ["gemm", "normalization", "gemm", "normalization", "elementwise"],
        "addressable": [False, True, False, True, True],
        "ts": [0.0, 100.0, 130.0, 230.0, 260.0], "dur": [100.0, 30.0, 100.0, 30.0, 20.0],
        "launch_ts": [-10.0] * 5, "stream": 7, "device": 0, "kind": "kernel",
    })
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
    assert ln.projected_us == pytest.approx(amdahl(base, 2.0, select(base.events, "op:aten::native_layer_norm")).projected_us)


def test_modules_grouped_across_layers(base):
    assert module_class_path("M_0.Layer_11.Linear_3") == "M.Layer.Linear"
    assert module_class_path("model.layers.3.mlp") == "model.layers.*.mlp"
    t = targets(base, speedup=1.5, by=("module",))
    assert t["name"].tolist() == ["M.Layer.Linear", "M.Layer.LayerNorm"]
    assert t.iloc[0].kernels == 2 and t.iloc[0].us == 200.0


def test_partly_addressable_and_replay_columns(base):
    ev = base.events.copy()
    ev.loc[4, "op"] = "aten::native_layer_norm"      # now the op is 60 us addressable + ... all addressable
    ev.loc[0, "op"] = "aten::native_layer_norm"      # and 100 us of gemm under it: partly
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
    cats = pd.DataFrame({"name": ["gemm", "attention", "elementwise"], "us": [60.0 * (1 - addr), 40.0 * (1 - addr), 100.0 * addr],
                         "addressable": [False, False, True]})
    return SimpleNamespace(categories=cats, total_us=100.0, addressable_fraction=addr, source=f"{family}-{params}.json",
                           manifest={"params": params, "family": family} if params else {})


def test_scaling_table_from_manifest_and_override():
    t = scaling_table([_fake(0.2, 7e9), _fake(0.35, 1e9)])
    assert t["params"].tolist() == [1e9, 7e9] and t["addressable_fraction"].tolist() == [0.35, 0.2]
    assert t["gemm_attention_fraction"].tolist() == pytest.approx([0.65, 0.8])
    assert t["family"].tolist() == ["llama", "llama"]
    t = scaling_table([_fake(0.2), _fake(0.3)], params=[2, 1], labels=["b", "a"], family="x")
    assert t["workload"].tolist() == ["a", "b"]
    with pytest.raises(UserError, match="parameter count"):
        scaling_table([_fake(0.2)])
