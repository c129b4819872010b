"""Figures: the bars and labels drawn are the numbers of the tables passed in (read back from the Figure)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import typer
from conftest import hta_trace
from matplotlib.patches import Rectangle
from typer.testing import CliRunner

from headroom.errors import UserError
from headroom.projection.project import project
from headroom.projection.speedups import parse_cli_speedup
from headroom.report import figure_files, plot
from headroom.report.tables import addressable_summary, category_fractions, projection_table
from headroom.trace.analysis import analyze


def _bars(fig) -> dict[str, Rectangle]:
    return {p.get_gid(): p for ax in fig.axes for p in ax.patches if p.get_gid()}


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


@pytest.fixture(scope="module")
def analyses():
    return [analyze(hta_trace("nccl_parser_config")), analyze(hta_trace("timeline_analysis"))]


def test_addressable_figure_draws_the_fractions(analyses):
    labels = ["resnet", "recsys"]
    fr = category_fractions(analyses, labels)
    sm = addressable_summary(analyses, labels)
    fig = plot.addressable_figure(fr, sm)
    bars = _bars(fig)
    for r in fr.itertuples(index=False):
        p = bars[f"{r.workload}|{r.category}|{'A' if r.addressable else 'N'}"]
        assert p.get_width() == pytest.approx(r.fraction)
        assert (p.get_hatch() == "///") == bool(r.addressable)  # addressable part is visibly distinct
    for _k, (w, a) in enumerate(zip(labels, analyses)):
        rows = fr[fr["workload"] == w]
        # segments are stacked in table order, non-addressable first
        lefts = [bars[f"{w}|{r.category}|{'A' if r.addressable else 'N'}"].get_x() for r in rows.itertuples()]
        assert lefts == pytest.approx(np.concatenate([[0], np.cumsum(rows["fraction"])[:-1]]))
        span = bars[f"{w}|addressable-span"]
        assert span.get_width() == pytest.approx(a.addressable_fraction)
        assert f"addressable {100 * a.addressable_fraction:.1f}%" in _texts(fig)
    big = fr[fr["fraction"] >= plot.LABEL_MIN]
    texts = _texts(fig)
    for f in big["fraction"]:
        assert f"{100 * f:.0f}%" in texts
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == labels


def test_projection_figure_draws_the_projection(analyses):
    results = [project(a, [parse_cli_speedup("category:addressable=1.5")]) for a in analyses]
    tbl = projection_table(results, ["resnet", "recsys"])
    fig = plot.projection_figure(tbl)
    bars = _bars(fig)
    for r in tbl.itertuples(index=False):
        assert bars[f"{r.workload}|baseline_ms"].get_width() == pytest.approx(100.0)
        assert bars[f"{r.workload}|amdahl_ms"].get_width() == pytest.approx(100 * r.amdahl_ms / r.baseline_ms)
        assert bars[f"{r.workload}|replay_ms"].get_width() == pytest.approx(100 * r.replay_ms / r.baseline_ms)
        change = round(100 * (r.amdahl_ms / r.baseline_ms - 1), 2) + 0.0
        assert f" {r.amdahl_ms:,.2f} ms ({change:+.2f}%)" in _texts(fig)
    # zero-time bounds are drawn as markers at their relative positions
    xs = np.concatenate([ln.get_xdata() for ln in fig.axes[0].lines])
    want = np.concatenate(
        [100 * tbl["amdahl_zero_ms"] / tbl["baseline_ms"], 100 * tbl["replay_zero_ms"] / tbl["baseline_ms"]]
    )
    assert sorted(xs) == pytest.approx(sorted(want))


def test_scaling_figure_draws_the_table():
    t = pd.DataFrame(
        {
            "workload": ["1B", "7B", "70B"],
            "family": "llama",
            "params": [1e9, 7e9, 7e10],
            "addressable_fraction": [0.3, 0.2, 0.1],
            "gemm_attention_fraction": [0.6, 0.75, 0.85],
        }
    )
    fig = plot.scaling_figure(t)
    lines = {ln.get_gid(): ln for ln in fig.axes[0].lines}
    assert list(lines["llama|addressable"].get_xdata()) == [1e9, 7e9, 7e10]
    assert list(lines["llama|addressable"].get_ydata()) == pytest.approx([30, 20, 10])
    assert list(lines["llama|gemm_attention"].get_ydata()) == pytest.approx([60, 75, 85])
    assert fig.axes[0].get_xscale() == "log"
    with pytest.raises(UserError):
        plot.scaling_figure(t.head(1))


def test_save_writes_all_formats(tmp_path):
    t = pd.DataFrame({"workload": ["a"], "category": ["gemm"], "addressable": [False], "us": [1.0], "fraction": [1.0]})
    paths = figure_files.save(plot.addressable_figure(t), tmp_path / "fig")
    assert sorted(p.suffix for p in paths) == [".pdf", ".png", ".svg"]
    for p in paths:
        assert p.stat().st_size > 1000
    assert paths[0].read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(UserError):
        figure_files.save(plot.addressable_figure(t), tmp_path / "x", ("jpg",))


def test_plot_cli(tmp_path):
    from headroom.cli.project import register

    app = typer.Typer()
    register(app)
    out = tmp_path / "plots"
    r = CliRunner().invoke(
        app,
        [
            "plot",
            str(hta_trace("nccl_parser_config")),
            str(hta_trace("base__base")),
            "--out",
            str(out),
            "--format",
            "png",
            "--format",
            "svg",
            "--label",
            "resnet",
            "--label",
            "base",
            "--params",
            "25e6",
            "--params",
            "1e6",
        ],
    )
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "addressable.png",
        "addressable.svg",
        "projection.png",
        "projection.svg",
        "scaling.png",
        "scaling.svg",
    ]
    r = CliRunner().invoke(app, ["plot", str(hta_trace("base__base")), "--out", str(out), "--figure", "scaling"])
    assert isinstance(r.exception, UserError)


def test_on_wall_shares_the_label_also_gives_the_share_of_gpu_time_report_prints(analyses):
    """The README figure said "addressable 28.6%" (of wall) beside a table saying 33.2% (of GPU time)."""
    fig = plot.addressable_figure(
        category_fractions(analyses, ["a", "b"], "wall"),
        addressable_summary(analyses, ["a", "b"], "wall"),
        basis="wall",
    )
    wall = addressable_summary(analyses, ["a", "b"], "wall")
    for a, w in zip(analyses, wall.itertuples(index=False)):
        assert w.kernel_fraction == pytest.approx(a.addressable_fraction)
        assert (
            f"addressable {100 * w.addressable_fraction:.1f}% of wall\n"
            f"({100 * a.addressable_fraction:.1f}% of GPU time)"
        ) in _texts(fig)


def _cpu_only_trace(builder, path):
    for n, t0 in ((1, 0.0), (2, 100.0)):
        builder.step(n, t0, 100.0)
        builder.cpu("aten::mm", t0 + 1, 40)
        builder.cpu("aten::layer_norm", t0 + 50, 20)
    return builder.write(path)


def test_cpu_only_traces_are_not_drawn_as_gpu_time(builder, tmp_path, capfd):
    from headroom.cli.app import run

    cpu = _cpu_only_trace(builder, tmp_path / "cpu.json")
    a = analyze(cpu)
    fig = plot.addressable_figure(category_fractions([a]), addressable_summary([a]), cpu_only=True)
    assert fig.axes[0].get_title().startswith("Where the CPU time goes (CPU-only traces: no GPU activity)")
    assert fig.axes[0].get_xlabel() == "share of CPU operator self time"
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        run(
            [
                "plot",
                str(cpu),
                str(hta_trace("timeline_analysis")),
                "--figure",
                "addressable",
                "--format",
                "png",
                "-o",
                str(out),
            ]
        )
    assert e.value.code == 2 and not list(out.glob("*"))
    assert "a CPU-only trace (no GPU activity) among GPU traces" in capfd.readouterr().err


def test_a_bad_speedup_writes_no_figure(tmp_path, capfd):
    """The addressable figure used to be written before the projection found the bad selector (exit 2)."""
    from headroom.cli.app import run

    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        run(["plot", str(hta_trace("timeline_analysis")), "-s", "category:nosuch=2", "--format", "png", "-o", str(out)])
    assert e.value.code == 2 and not list(out.glob("*"))
    assert "unknown category 'nosuch'" in capfd.readouterr().err
