"""Projections: hand-computed Amdahl, timeline replay (launch-bound, back-to-back, syncs, cross-stream
waits), bounds and distributions, real traces, and the `project --json` contract."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import typer
from conftest import hta_trace
from typer.testing import CliRunner

from headroom.errors import UserError
from headroom.jsonio import plain
from headroom.projection.amdahl import amdahl
from headroom.projection.baseline import Baseline, as_baseline
from headroom.projection.distributions import Distribution
from headroom.projection.matching import select
from headroom.projection.project import project
from headroom.projection.replay import replay, replay_check, replay_gain, replay_projection
from headroom.projection.scenarios import distribution_scenarios
from headroom.projection.speedups import parse_cli_speedup
from headroom.projection.streams import cross_stream_deps, pid_codes
from headroom.report.tables import projection_table
from headroom.trace.analysis import analyze


def kernels(rows, window=None, **kw) -> Baseline:
    """rows: (name, category, launch_ts, ts, dur[, stream])."""
    df = pd.DataFrame(
        [r if len(r) == 6 else (*r, 7) for r in rows], columns=["name", "category", "launch_ts", "ts", "dur", "stream"]
    )
    df["op"] = "aten::" + df["name"]
    df["top_op"] = df["op"]
    df["addressable"] = ~df["category"].isin(["gemm", "attention", "conv", "memory", "communication"])
    df["kind"] = "kernel"
    df["device"] = 0
    df["launch_pid"] = "1"
    df["correlation"] = np.arange(len(df)) + 100
    return Baseline.from_events(df, window=window, **kw)


@pytest.fixture
def three() -> Baseline:
    # gemm 0-100, embedding 100-160, elementwise 160-200; window 0-250 (50 us idle at the end).
    return kernels(
        [
            ("mm", "gemm", -50, 0, 100),
            ("embedding_bag", "embedding", -49, 100, 60),
            ("add", "elementwise", -48, 160, 40),
        ],
        window=(0.0, 250.0),
    )


# --- Amdahl, by hand ---------------------------------------------------------------------


def test_amdahl_hand_computed(three):
    ev = three.events
    emb = select(ev, "category:embedding")
    # T' = 250 - 60 (1 - 1/1.5) = 230
    assert amdahl(three, 1.5, emb).projected_us == pytest.approx(230.0)
    # two entries: embedding 1.5x (saves 20) and elementwise 2x (saves 20) -> 210
    f = np.where(emb, 1.5, np.where(select(ev, "category:elementwise"), 2.0, 1.0))
    p = amdahl(three, f)
    assert p.projected_us == pytest.approx(210.0)
    assert p.gain == pytest.approx(40 / 250) and p.speedup == pytest.approx(250 / 210)
    # zero time: the embedding kernel vanishes -> 190
    assert amdahl(three, math.inf, emb).projected_us == pytest.approx(190.0)
    # a slowdown (s < 1) costs time: 60 (1 - 1/0.5) = -60 -> 310
    assert amdahl(three, 0.5, emb).projected_us == pytest.approx(310.0)


def test_amdahl_holds_idle_fixed_and_breaks_down(three):
    base = amdahl(three, 1.0)
    assert base.projected_us == 250.0
    bd = base.breakdown
    assert (bd.kernel_us, bd.idle_us, bd.memory_us, bd.communication_us) == (200.0, 50.0, 0.0, 0.0)
    p = amdahl(three, 2.0, select(three.events, "category:elementwise"))
    assert p.breakdown.idle_us == pytest.approx(50.0)
    assert p.breakdown.kernel_us == pytest.approx(180.0)
    d = plain(p.breakdown)
    assert d["kernel_fraction"] + d["idle_fraction"] == pytest.approx(1.0)


def test_amdahl_uses_wall_share_for_overlapping_streams():
    # Two 100 us kernels fully overlapped on two streams: each owns 50 us of busy time.
    b = kernels([("a", "elementwise", -10, 0, 100, 7), ("b", "elementwise", -10, 0, 100, 8)])
    assert b.events["wall_us"].tolist() == [50.0, 50.0]
    assert amdahl(b, math.inf, np.array([True, False])).projected_us == pytest.approx(50.0)


def test_memory_and_communication_in_breakdown():
    b = kernels(
        [("mm", "gemm", -5, 0, 50), ("copy", "memory", -5, 50, 20), ("nccl", "communication", -5, 70, 30)],
        window=(0, 200),
    )
    d = plain(amdahl(b, 1.0).breakdown)
    assert (d["kernel_us"], d["memory_us"], d["communication_us"], d["idle_us"]) == (50.0, 20.0, 30.0, 100.0)


# --- timeline replay ------------------------------------------------------------------------


def test_replay_back_to_back_equals_amdahl():
    # All launched long before they run; each starts when the previous ends.
    rows = [(f"k{i}", "elementwise" if i % 2 else "gemm", -1000 + i, 10.0 * i * 2, 20.0) for i in range(20)]
    b = kernels(rows)
    assert b.wall_us == 400.0
    mask = select(b.events, "category:elementwise")
    for s in (1.5, 2.0, 4.0, math.inf):
        assert replay_projection(b, s, mask).projected_us == pytest.approx(amdahl(b, s, mask).projected_us)
    assert replay_projection(b, 2.0, mask).projected_us == pytest.approx(400 - 10 * 10)


def test_replay_launch_bound_kernels_buy_nothing():
    # The CPU launches a kernel every 50 us; each runs 5 us after its launch for 10 us: GPU mostly idle.
    rows = [(f"k{i}", "elementwise", 50.0 * i, 50.0 * i + 5, 10.0) for i in range(10)]
    b = kernels(rows, window=(0.0, 465.0))
    mask = np.arange(10) < 9  # everything but the last kernel
    r = replay_projection(b, 2.0, mask)
    assert r.projected_us == pytest.approx(465.0)  # nothing changes
    assert r.gain == pytest.approx(0.0)
    assert amdahl(b, 2.0, mask).projected_us == pytest.approx(465.0 - 9 * 5)  # what Amdahl wrongly claims
    # Replay reports the GPU got idler instead.
    assert r.breakdown.idle_us > amdahl(b, 1.0).breakdown.idle_us


def test_replay_mixed_queue_then_launch_bound():
    # A queued burst (back to back) followed by a launch-bound tail: only the burst's savings count,
    # and only until the tail's launches (which stay fixed) take over.
    rows = [
        ("a", "elementwise", 0, 10, 100),
        ("b", "elementwise", 1, 110, 100),  # burst 10-210
        ("c", "elementwise", 300, 305, 10),
    ]  # launched at 300
    b = kernels(rows, window=(0.0, 315.0))
    assert replay_projection(b, 2.0, np.array([True, True, False])).projected_us == pytest.approx(315.0)
    assert amdahl(b, 2.0, np.array([True, True, False])).projected_us == pytest.approx(215.0)


def test_replay_without_change_reproduces_timeline(three):
    r = replay(three)
    assert np.allclose(r.ts, three.events["ts"]) and r.projected_us == pytest.approx(three.wall_us)


def test_replay_sync_moves_later_cpu_launches(builder, tmp_path):
    # Kernel A (500 us) is waited for by cudaDeviceSynchronize; kernel B is launched after it returns.
    builder.step(1, 0, 550)
    builder.kernel("elementwise_kernel_A", launch_ts=10, ts=20, dur=500)
    builder.events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaDeviceSynchronize",
            "pid": builder.pid,
            "tid": builder.tid,
            "ts": 30,
            "dur": 495,
            "args": {"correlation": 1},
        }
    )
    builder.kernel("elementwise_kernel_B", launch_ts=530, ts=535, dur=10)
    a = analyze(builder.write(tmp_path / "t.json"))
    assert a.wall_us == 550.0
    mask = select(a.events, "kernel:_A$")
    r = replay(a, 2.0, mask)
    # A ends at 270; the sync returns 5 us later (275, not 525): everything after moves 250 us earlier.
    assert r.max_cpu_shift_us == pytest.approx(250.0)
    assert r.ts[1] == pytest.approx(285.0)
    assert r.projected_us == pytest.approx(300.0)  # the step's CPU end also moved: 550 - 250
    assert replay_check(a)["max_abs_error_us"] == 0.0


def test_cross_stream_wait_from_cuda_sync_events():
    # P on stream 1 (0-100); C on stream 2 waits for P (recorded by cudaEventRecord corr 900); C is
    # launched after the wait (-4), as a consumer is.
    b = kernels([("P", "elementwise", -10, 0, 100, 1), ("C", "elementwise", -3, 101, 50, 2)])
    b.runtime = pd.DataFrame(
        {"name": ["cudaEventRecord"], "pid": ["1"], "tid": ["1"], "ts": [-8.0], "dur": [1.0], "correlation": [900]}
    )
    mask = np.array([True, False])
    # Without the wait record, C's start stays where it was measured: no gain.
    assert replay_projection(b, 2.0, mask).projected_us == pytest.approx(151.0)
    b.syncs = pd.DataFrame(
        {
            "name": ["Stream Wait Event"],
            "stream": [2],
            "ts": [-4.0],
            "wait_on_stream": [1],
            "wait_on_cuda_event_record_corr_id": [900],
        }
    )
    assert cross_stream_deps(b.events, b.syncs, b.runtime).tolist() == [-1, 0]
    assert replay_projection(b, 2.0, mask).projected_us == pytest.approx(101.0)
    assert replay(b).projected_us == pytest.approx(151.0)


def test_replay_memo_returns_the_same_replay_until_the_baseline_changes():
    b = kernels([("P", "elementwise", -10, 0, 100, 1), ("C", "elementwise", -3, 101, 50, 2)])
    mask = np.array([True, False])
    first = replay(b, 2.0, mask)
    assert replay(b, 2.0, mask) is first  # the same factors: not replayed again
    assert replay(b, 2.0, mask, cpu_scale=0.5) is not first
    assert first.end[0] == pytest.approx(50.0) and replay(b, 4.0, mask).end[0] == pytest.approx(25.0)
    with pytest.raises(ValueError):
        first.ts[0] = 1.0  # shared: read-only
    # A changed field of the baseline (here its syncs) is a different replay.
    b.runtime = pd.DataFrame(
        {"name": ["cudaEventRecord"], "pid": ["1"], "tid": ["1"], "ts": [-8.0], "dur": [1.0], "correlation": [900]}
    )
    b.syncs = pd.DataFrame(
        {
            "name": ["Stream Wait Event"],
            "stream": [2],
            "ts": [-4.0],
            "wait_on_stream": [1],
            "wait_on_cuda_event_record_corr_id": [900],
        }
    )
    again = replay(b, 2.0, mask)
    assert again is not first and again.projected_us == pytest.approx(101.0)


def test_replays_share_one_plan_and_carry_no_state_between_them():
    rows = [
        ("A", "elementwise", -10, 0, 40, 1),
        ("B", "gemm", -8, 40, 30, 1),
        ("C", "elementwise", -3, 75, 20, 2),
        ("D", "elementwise", 60, 100, 10, 1),
        ("E", "softmax", 61, 111, 5, 2),
    ]
    mask = np.array([True, False, True, True, False])

    def fresh():
        b = kernels(rows)
        b.runtime = pd.DataFrame(
            {
                "name": ["cudaDeviceSynchronize"],
                "pid": ["1"],
                "tid": ["1"],
                "ts": [50.0],
                "dur": [50.0],
                "correlation": [-1],
            }
        )
        return b

    shared = fresh()
    got = [replay(shared, f, mask, cpu_scale=c) for f, c in ((2.0, 1.0), (4.0, 0.5), (1.5, 1.0))]
    for (f, c), r in zip(((2.0, 1.0), (4.0, 0.5), (1.5, 1.0)), got):
        alone = replay(fresh(), f, mask, cpu_scale=c)  # its own baseline: nothing memoised before it
        assert r.ts.tolist() == alone.ts.tolist() and r.end.tolist() == alone.end.tolist()
        assert r.projected_us == alone.projected_us and r.n_syncs == alone.n_syncs == 1
    assert len(shared.__dict__["_plans"][1]) == 1  # one plan for the three (same parameters)


def _pid_codes_one_by_one(values, table):
    out = []
    for v in values:
        key = "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
        out.append(table.setdefault(key, len(table)))
    return out


@pytest.mark.parametrize(
    "values",
    [
        ["7", "7", "9", None, "7", float("nan"), "9"],
        [None, 3, "3", 4.0, "x"],
        pd.Series(["b", "a", "b"], dtype="category"),
        [],
    ],
)
def test_pid_codes_per_distinct_value_match_one_by_one(values):
    table, expected_table = {"9": 0}, {"9": 0}
    got = pid_codes(values, table)
    assert got.tolist() == _pid_codes_one_by_one(list(values), expected_table)
    assert table == expected_table  # the same texts, added in the same order


# --- bounds and distributions ------------------------------------------------------------------


def test_paper_recommender_number():
    # 58.2% addressable, 41.7% win rate at a 1.552x median: the paper's 8.63% end to end.
    b = kernels([("emb", "embedding", -10, 0, 58.2), ("mm", "gemm", -9, 58.2, 41.8)])
    sc = distribution_scenarios(win_rate=0.417, median=1.552, quantiles=())
    p = amdahl(b, sc[0].factor, select(b.events, "category:addressable"))
    assert p.gain == pytest.approx(0.0863, abs=5e-5)


def test_distribution_scenarios_quantiles_and_expected():
    d = Distribution((2.0, None, 0.5, 1.5))  # effective: 2, 1, 1, 1.5
    sc = {s.name: s.factor for s in distribution_scenarios(d, quantiles=(0.5, 0.9))}
    assert sc["win_rate_x_median"] == pytest.approx(1 / (1 - 0.5 + 0.5 / 1.75))
    assert sc["quantile_0.5"] == pytest.approx(1.25)
    assert sc["quantile_0.9"] == pytest.approx(np.quantile([2, 1, 1, 1.5], 0.9))
    assert sc["expected"] == pytest.approx(1 / np.mean([0.5, 1, 1, 1 / 1.5]))
    with pytest.raises(UserError):
        distribution_scenarios(win_rate=0.4)
    with pytest.raises(UserError):
        distribution_scenarios(win_rate=1.4, median=1.5)


def test_project_result_and_json_keys(three):
    res = project(three, [parse_cli_speedup("category:embedding=1.5")], win_rate=0.5, median=2.0)
    d = json.loads(json.dumps(plain(res)))
    assert d["baseline_us"] == 250.0 and d["per_step_us"] == 250.0
    methods = {(p["method"], p["scenario"]) for p in d["projections"]}
    assert {
        ("amdahl", "speedups"),
        ("replay", "speedups"),
        ("amdahl", "zero_time"),
        ("replay", "zero_time"),
        ("amdahl", "win_rate_x_median"),
        ("replay", "win_rate_x_median"),
    } <= methods
    for p in d["projections"]:
        assert {"method", "projected_us", "speedup", "gain", "breakdown"} <= set(p)
        assert p["speedup"] == pytest.approx(250.0 / p["projected_us"])
    am = res.get("amdahl")
    assert am.projected_us == pytest.approx(230.0)
    assert res.get("amdahl", "zero_time").projected_us == pytest.approx(190.0)
    # addressable = embedding + elementwise = 100 us; w = 0.5, m = 2: saves 100 * 0.5 * 0.5 = 25
    assert res.get("amdahl", "win_rate_x_median").projected_us == pytest.approx(225.0)
    assert d["entries"][0]["kernels"] == 1 and d["replay_check"]["max_abs_error_us"] == 0.0


def test_project_needs_something(three):
    with pytest.raises(UserError, match="nothing to project"):
        project(three, [])


def test_projection_table(three):
    res = project(three, [parse_cli_speedup("category:embedding=1.5")])
    t = projection_table([res], ["w"])
    assert t.loc[0, "baseline_ms"] == pytest.approx(0.25)
    assert t.loc[0, "amdahl_ms"] == pytest.approx(0.23) and t.loc[0, "amdahl_zero_ms"] == pytest.approx(0.19)


# --- real traces ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nccl_parser_config", "timeline_analysis", "amd_trace", "base__base"])
def test_replay_reproduces_real_traces(name):
    a = analyze(hta_trace(name))
    c = replay_check(a)
    assert c["max_abs_error_us"] < 1e-6 and abs(c["window_error_us"]) < 1e-6


@pytest.mark.parametrize("name", ["resnet-50.train.json.gz", "dlrm.train.json.gz"])
def test_replay_gain_is_the_projections_gain(name):
    """targets' replay_gain (no breakdown) against replay_projection's, on real traces."""
    a = analyze(SHIPPED_TRACES / name)
    b = as_baseline(a)
    gains = []
    for selector in ("category:conv", "category:gemm", "category:embedding", "category:communication", "kind:memcpy"):
        mask = select(b.events, selector)
        for factor in (1.3, 2.0, math.inf):
            gains.append(replay_gain(b, factor, mask))
            assert gains[-1] == replay_projection(b, factor, mask).gain, (selector, factor)
    assert max(gains) > 0.0


def test_real_recommender_projection():
    # fbgemm TBE recommender (A100, 2 steps): embedding kernels at 1.552x.
    a = analyze(hta_trace("timeline_analysis"))
    res = project(a, [parse_cli_speedup("category:embedding=1.552")])
    am, rp = res.get("amdahl"), res.get("replay")
    assert res.baseline_us == a.wall_us and res.per_step_us == a.step_us
    assert 0.0 < am.gain < res.get("amdahl", "zero_time").gain < 0.2
    # This trace is CPU-bound (GPU idle most of the window): replay finds (almost) nothing to gain.
    assert rp.gain <= am.gain and rp.gain < 0.005
    assert plain(res.baseline)["idle_fraction"] > 0.4


def test_cpu_only_trace_gets_amdahl_only():
    a = analyze(hta_trace("cpu_only"))
    res = project(a, [parse_cli_speedup("category:*=2")])
    assert res.get("replay") is None and res.get("amdahl") is not None
    assert any("replay needs GPU events" in w for w in res.warnings)


# --- the command ---------------------------------------------------------------------------------


def _app() -> typer.Typer:
    from headroom.cli.project import register

    app = typer.Typer()
    register(app)
    return app


def test_project_cli_json_matches_classify_window():
    path = hta_trace("nccl_parser_config")
    r = CliRunner().invoke(
        _app(), ["project", str(path), "--json", "-s", "category:normalization=2", "-s", "op:aten::cudnn_batch_norm=3"]
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout.strip().splitlines()[-1])
    a = analyze(path)
    assert d["baseline_us"] == pytest.approx(a.to_dict()["wall_us"])
    assert d["per_step_us"] == pytest.approx(a.step_us)
    assert any("overlaps" in w for w in d["warnings"])
    assert [p["method"] for p in d["projections"]][:2] == ["amdahl", "replay"]


def test_project_cli_user_errors():
    path = hta_trace("base__base")
    r = CliRunner().invoke(_app(), ["project", str(path), "-s", "category:embedding=-1"])
    assert isinstance(r.exception, UserError) and "> 0" in str(r.exception)
    r = CliRunner().invoke(_app(), ["project", str(path), "-s", "category:conv=2", "--strict"])
    assert isinstance(r.exception, UserError) and "matches no kernel" in str(r.exception)


def test_project_cli_distribution_and_verify_suite(tmp_path):
    suite = tmp_path / "suite.json"
    suite.write_text(
        json.dumps(
            {
                "tool": "headroom verify",
                "version": 1,
                "results": [
                    {"problem": "01_EmbeddingBagSum", "verdict": "pass", "speedup": 1.552, "checks": []},
                    {"problem": "11_PermutePooledEmbeddings", "verdict": "pass", "speedup": 1.8, "checks": []},
                    {"problem": "04_DotInteraction", "verdict": "fail", "speedup": 2.1, "checks": []},
                    {"problem": "10_JaggedSoftmax", "verdict": "pass", "speedup": 0.9, "checks": []},
                ],
            }
        )
    )
    r = CliRunner().invoke(
        _app(),
        [
            "project",
            str(hta_trace("timeline_analysis")),
            "--json",
            "-f",
            str(suite),
            "--distribution",
            str(suite),
            "--quantile",
            "0.5",
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert [e["selector"] for e in d["entries"]] == [
        "problem:01_EmbeddingBagSum",
        "problem:11_PermutePooledEmbeddings",
        "problem:10_JaggedSoftmax",
    ]
    assert all(e["verified"] for e in d["entries"])
    w = " | ".join(d["warnings"])
    assert "04_DotInteraction" in w and "slowdown" not in w  # 10 matches nothing here, so no slowdown applies
    assert d["distribution"]["win_rate"] == 0.5 and d["distribution"]["median_win"] == pytest.approx(1.676)
    sc = {(p["method"], p["scenario"]): p for p in d["projections"]}
    assert sc[("amdahl", "quantile_0.5")]["factor"] == pytest.approx(np.quantile([1.552, 1.8, 1.0, 1.0], 0.5))
    assert sc[("amdahl", "win_rate_x_median")]["gain"] > sc[("replay", "win_rate_x_median")]["gain"] >= 0


# --- the shipped H200 traces (traces/) -------------------------------------------------------------

from conftest import SHIPPED_TRACES  # noqa: E402


def shipped(name: str):
    p = SHIPPED_TRACES / f"{name}.json.gz"
    if not p.exists():
        pytest.skip(f"{p} is not in this checkout")
    return analyze(p)


@pytest.mark.parametrize(
    "name", ["dlrm.train", "llama-7b.infer.prefill", "llama-7b.infer.decode.static-cache", "resnet-50.train"]
)
def test_replay_reproduces_shipped_traces(name):
    c = replay_check(shipped(name))
    assert c["max_abs_error_us"] < 1e-6 and abs(c["window_error_us"]) < 1e-6


def test_shipped_recommender_paper_scenario():
    a = shipped("dlrm.train")
    r = project(a, [], win_rate=0.417, median=1.552, quantiles=())
    am, rp = r.get("amdahl", "win_rate_x_median"), r.get("replay", "win_rate_x_median")
    # 0.417 x (1 - 1/1.552) x addressable share of the window (the paper: 8.63% at 58.2%)
    assert am.gain == pytest.approx(0.417 * (1 - 1 / 1.552) * r.distribution["selected_wall_us"] / a.wall_us)
    assert 0.06 < am.gain < 0.12 and 0.0 < rp.gain <= am.gain + 1e-9


def test_shipped_gpu_bound_prefill_replay_equals_amdahl():
    a = shipped("llama-7b.infer.prefill")
    r = project(a, [parse_cli_speedup("category:elementwise=2")])
    assert r.get("replay").gain == pytest.approx(r.get("amdahl").gain, rel=1e-3)


def test_shipped_launch_bound_decode_gains_nothing():
    a = shipped("llama-7b.infer.decode.static-cache")
    r = project(a, [parse_cli_speedup("category:addressable=2")])
    assert r.get("amdahl").gain > 0.001
    assert r.get("replay").gain < 1e-4 and r.get("replay", "zero_time").gain < 1e-4


def test_cross_stream_wait_runs_on_a_kineto_trace_with_sync_records(builder, tmp_path):
    """The loader keeps cuda_sync records (Trace.syncs), so the replay's wait model runs on a real-format trace."""
    from tests.test_trace import _stream_wait_trace

    a = analyze(_stream_wait_trace(builder, tmp_path / "sync.json"))
    assert a.wall_us == pytest.approx(171.0)
    check = replay_check(a)
    assert check["cross_stream_deps"] == 1 and check["max_abs_error_us"] == 0.0
    res = project(a, [parse_cli_speedup("kernel:^P$=2")])
    # P (stream 7) takes 50 us instead of 100; C (stream 8) waited on it, so it starts at 70 + the
    # measured 1 us gap and the window ends at 121. Without the wait record C would stay at 121-171.
    assert res.get("replay").projected_us == pytest.approx(121.0)
    assert res.get("replay", "zero_time").projected_us == pytest.approx(100.0)  # C at launch + 5 us; CPU step end
    no_syncs = Baseline.from_analysis(a)
    no_syncs.syncs = None
    assert project(no_syncs, [parse_cli_speedup("kernel:^P$=2")]).get("replay").projected_us == pytest.approx(171.0)


# --- numbers printed side by side are of the same quantities ------------------------------------------

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_NUM = r"([0-9][0-9,]*\.[0-9]+)"


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def _close(ratio: float, base: float, proj: float, ratio_digits: int, ms_digits: int = 3) -> bool:
    """`ratio` (printed with `ratio_digits` decimals) is base/proj (each printed with `ms_digits`)."""
    r_err, t_err = 0.5 * 10**-ratio_digits, 0.5 * 10**-ms_digits
    want = base / proj
    return abs(ratio - want) <= r_err + want * (t_err / base + t_err / proj) + 1e-9


def printed_ratios(text: str) -> list[tuple[str, float, float, float, int]]:
    """(what, ratio, base, projected, ratio decimals) for every ratio `project` prints beside two times."""
    import re

    out = []
    m = re.search(rf"estimate \(\w+\): ([0-9.]+)x end-to-end.*?{_NUM} -> {_NUM} ms/step", text)
    if m:
        out.append(("estimate", _f(m[1]), _f(m[2]), _f(m[3]), 3))
    measured = _f(re.search(rf"measured: {_NUM} ms/step", text)[1])
    u = re.search(rf"unprofiled: {_NUM} ms/step", text)
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) < 6 or cells[1] not in ("amdahl", "replay"):
            continue
        out.append((f"{cells[0]} {cells[1]}", _f(cells[5].rstrip("x")), measured, _f(cells[3]), 4))
        if u:
            out.append((f"{cells[0]} {cells[1]} unprofiled", _f(cells[7].rstrip("x")), _f(u[1]), _f(cells[6]), 4))
    return out


_TRACES = [
    "vit-b-16.infer.json.gz",
    "llama-7b.infer.prefill.json.gz",
    "dlrm.train.json.gz",
    "llama-7b.infer.decode.static-cache.json.gz",
]


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.generate],
)  # no shrinking: each example is a whole `project` run
@given(
    trace=st.sampled_from(_TRACES),
    selector=st.sampled_from(
        ["category:addressable", "category:gemm", "category:elementwise", "category:normalization"]
    ),
    factor=st.floats(1.05, 8.0),
    step=st.one_of(st.none(), st.floats(1.0, 1.6)),
)
def test_every_ratio_project_prints_is_the_ratio_of_the_two_times_it_prints(headroom, trace, selector, factor, step):
    path = SHIPPED_TRACES / trace
    args = ["project", path, "-s", f"{selector}={factor:.4g}"]
    if step is not None:  # an unprofiled step between the GPU's busy time and 1.6 times it
        from headroom.projection.baseline import as_baseline
        from headroom.projection.overhead import gpu_busy_per_step_us

        busy = gpu_busy_per_step_us(as_baseline(analyze(path)))
        args += ["--step-ms", f"{step * busy / 1e3 + 0.01:.3f}"]
    p = headroom(*args)
    assert p.returncode == 0, p.stderr
    found = printed_ratios(p.stdout)
    assert len(found) >= 5
    for what, ratio, base, proj, digits in found:
        assert _close(ratio, base, proj, digits), (what, ratio, base, proj, base / proj)


def test_the_estimate_beside_an_unreachable_unprofiled_step_is_of_that_step(headroom):
    """Even a free CPU leaves BERT's replay (13.709 ms) above a 13.2 ms unprofiled step; the estimate used
    to print the replay's ratio beside a step it never reached. No shipped trace's manifest step is out of
    reach, so the step is given (`--step-ms` takes the manifest's place in the same correction)."""
    p = headroom(
        "project", SHIPPED_TRACES / "bert-base.infer.json.gz", "-s", "category:addressable=1.5", "--step-ms", "13.2"
    )
    assert p.returncode == 0
    assert "estimate (speedups): 1.117x end-to-end, between 1.086x and 1.125x   13.200 -> 11.817 ms/step" in p.stdout
    assert "the CPU taken as free and the GPU timeline x0.9629 to the unprofiled 13.200 ms/step" in p.stdout
    assert "x0.000" not in p.stdout
    ratios = printed_ratios(p.stdout)
    assert all(_close(r, b, q, d) for _, r, b, q, d in ratios) and len(ratios) == 9


def test_projection_chart_is_on_the_clock_project_leads_with():
    res = project(analyze(SHIPPED_TRACES / "vit-b-16.infer.json.gz"), [parse_cli_speedup("category:addressable=1.5")])
    row = projection_table([res]).iloc[0]
    assert row.clock == "unprofiled" and row.baseline_ms == pytest.approx(12.33251)
    assert row.replay_ms == pytest.approx(res.estimate.projected_us / 3 / 1e3, rel=1e-3)
    assert row.replay_gain == pytest.approx(0.0962, abs=1e-4)  # was +0.00%: the profiled clock's replay


@pytest.mark.parametrize(
    "step_ms,message",
    [
        ("0.001", "--step-ms 0.001: shorter than the GPU's own busy time in"),
        ("10", "--step-ms 10: shorter than the GPU's own busy time in"),
        ("0", "--step-ms must be a positive number of milliseconds, got 0.0"),
    ],
)
def test_a_step_the_trace_rules_out_is_refused(headroom, step_ms, message):
    p = headroom(
        "project",
        SHIPPED_TRACES / "llama-7b.infer.prefill.json.gz",
        "-s",
        "category:addressable=1.5",
        "--step-ms",
        step_ms,
    )
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.splitlines()) == 1 and message in p.stderr
    if step_ms == "10":
        assert "(244.442 ms per step)" in p.stderr


def test_a_step_dropped_in_the_middle_is_left_out_of_the_replay_too(builder, tmp_path):
    for n, t0 in ((1, 0.0), (2, 100.0), (3, 200.0)):
        builder.step(n, t0, 100.0 if n != 2 else -1.0)  # dropped by --lenient
        builder.cpu("aten::mm", t0 + 1, 10)
        builder.kernel("sm90_gemm", launch_ts=t0 + 2, ts=t0 + 10, dur=50)
    a = analyze(builder.write(tmp_path / "t.json"), lenient=True, use_cache=False)
    res = project(a, [parse_cli_speedup("category:gemm=2")])
    assert a.wall_us == 200.0 and res.replay_check["window_error_us"] == pytest.approx(0.0, abs=1e-6)
    assert not any("off the measured window" in w for w in res.warnings)  # was 100 us off
    assert res.get("replay").baseline_us == 200.0
