"""Figures worth putting in a paper, and the README that shows them: zero-time ticks that
can be seen, idle shown (or the basis in the title), the legend in stacking order, greys a reader can
tell apart, scaling points labelled by size with extrapolated ones marked, no empty axis range; the
committed figure's numbers and README's command output are what the shipped traces give now."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess

import numpy as np
import pytest
from matplotlib.colors import to_rgb

from headroom.projection.project import project
from headroom.projection.speedups import parse_cli_speedup
from headroom.report import figure_files, plot
from headroom.report.scaling import scaling_table
from headroom.report.tables import addressable_summary, category_fractions, projection_table
from headroom.trace.analysis import analyze
from tests.conftest import REPO, SHIPPED_TRACES

FIGURES = REPO / "docs" / "figures"


@pytest.fixture(scope="module")
def shipped():
    return {p.name: analyze(p) for p in sorted(SHIPPED_TRACES.glob("*.json.gz"))}


def test_the_committed_figure_shows_what_the_traces_give_now(shipped):
    numbers = json.loads((FIGURES / "addressable.json").read_text())
    assert numbers["schema"] == "headroom.figure.addressable/1" and numbers["basis"] == "wall"
    analyses = [shipped[p.rsplit("/", 1)[-1]] for p in numbers["traces"]]
    assert len(analyses) == 10
    fresh = figure_files.addressable_numbers(
        category_fractions(analyses, basis="wall"),
        addressable_summary(analyses, basis="wall"),
        "wall",
        numbers["traces"],
    )
    assert fresh == numbers, "docs/figures/addressable.* is stale: run `make figures`"
    assert (FIGURES / "addressable.png").stat().st_mtime >= 0 and (FIGURES / "addressable.png").stat().st_size > 50_000
    scaling = json.loads((FIGURES / "scaling.json").read_text())
    assert [r["workload"] for r in scaling["rows"]] == [
        "llama-7b infer prefill",
        "llama-13b infer prefill (4 of 40 layers)",
        "llama-70b infer prefill (4 of 80 layers)",
    ]
    assert [r["extrapolated"] for r in scaling["rows"]] == [False, True, True]


def test_readme_shows_the_commands_current_output_and_links_nothing_outside(monkeypatch, capfd):
    from headroom.cli.app import run

    spec = importlib.util.spec_from_file_location("readme_output", REPO / "scripts" / "readme_output.py")
    readme_output = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(readme_output)

    def in_process(command: str) -> str:
        monkeypatch.chdir(REPO)
        capfd.readouterr()
        with pytest.raises(SystemExit) as e:
            run(shlex.split(command)[1:])
        out, _ = capfd.readouterr()
        assert e.value.code in (0, 1), command
        return "\n".join(line.rstrip() for line in out.rstrip("\n").splitlines()) + "\n"

    monkeypatch.setattr(readme_output, "run", in_process)
    text = (REPO / "README.md").read_text()
    assert readme_output.regenerate(text) == text, "README's output is stale: run `make readme`"
    assert len(readme_output.BLOCK.findall(text)) >= 4
    # self-contained: no link or path outside the repository (it used to point at ../shared)
    assert not re.search(r"\]\((\.\./|/)|`\.\./|\.\./shared", text)
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        assert target.startswith("http") or (REPO / target).exists(), target


def test_figures_regenerate_from_the_shipped_traces(tmp_path):
    # `make figures` runs these two commands.
    p = subprocess.run(["make", "-s", "-n", "figures"], cwd=REPO, capture_output=True, text=True)
    assert "plot traces/ --figure addressable" in p.stdout and "--numbers --out docs/figures" in p.stdout


def test_zero_time_ticks_are_visible_over_the_bars(shipped):
    a = [shipped["dlrm.train.json.gz"], shipped["bert-base.infer.json.gz"]]
    results = [project(x, [parse_cli_speedup("category:addressable=1.5")]) for x in a]
    fig = plot.projection_figure(projection_table(results, ["dlrm", "bert"]))
    ax = fig.axes[0]
    ticks = [ln for ln in ax.lines if (ln.get_gid() or "").endswith("|ticks")]
    bars = [p for p in ax.patches if p.get_gid()]
    assert len(ticks) == 2
    for ln in ticks:  # they used to be drawn in the bar's own colour
        assert to_rgb(ln.get_color()) == (0.0, 0.0, 0.0) and ln.get_zorder() > max(b.get_zorder() for b in bars)
        assert ln.get_path_effects()  # a white halo, so a tick on a dark bar shows too
    lo, hi = ax.get_xlim()
    zero = np.concatenate([ln.get_xdata() for ln in ticks])
    assert 0 < lo <= zero.min() and hi >= 100  # no empty range below the smallest bar


def test_addressable_figure_shows_idle_legend_in_stacking_order_and_distinct_greys(shipped):
    a = [shipped["llama-7b.infer.decode.static-cache.json.gz"], shipped["resnet-50.train.json.gz"]]
    fr = category_fractions(a, ["decode", "resnet"], basis="wall")
    fig = plot.addressable_figure(fr, addressable_summary(a, ["decode", "resnet"], basis="wall"), basis="wall")
    ax = fig.axes[0]
    assert "idle included" in ax.get_title() and "idle included" in ax.get_xlabel()
    decode = fr[fr["workload"] == "decode"].set_index("category")
    assert round(100 * decode.loc["idle", "fraction"]) == 90  # decode looked 29% addressable of kernel time
    kernel = plot.addressable_figure(category_fractions(a, ["d", "r"]), basis="kernel")
    assert "idle not shown" in kernel.axes[0].get_title()
    # legend read row by row = the order the segments stack, left to right
    leg = ax.get_legend()
    ncol = leg._ncols
    labels = [t.get_text().rstrip(" *") for t in leg.get_texts()]
    nrows = -(-len(labels) // ncol)
    sizes = [len(c) for c in np.array_split(np.arange(len(labels)), ncol)]
    columns, k = [], 0
    for s in sizes:
        columns.append(labels[k : k + s])
        k += s
    row_major = [columns[c][r] for r in range(nrows) for c in range(ncol) if r < len(columns[c])]
    stack = list(fr.sort_values("stack")["category"].drop_duplicates())
    assert row_major == stack
    for w in ("decode", "resnet"):
        seg = [
            p.get_gid().split("|")[1]
            for p in ax.patches
            if (p.get_gid() or "").startswith(f"{w}|") and p.get_gid().count("|") == 2
        ]
        assert seg == [c for c in stack if c in set(fr.loc[fr["workload"] == w, "category"])]
    greys = [np.mean(to_rgb(plot.COLORS[c])) for c in ("gemm", "attention", "conv", "communication", "memory")]
    assert min(np.diff(sorted(greys))) > 0.08  # the old greys were 13% apart at best, two of them near-equal


def test_scaling_points_are_labelled_by_size_and_extrapolated_ones_marked(shipped):
    seven = shipped["llama-7b.infer.prefill.json.gz"]
    parts = [analyze(p) for p in sorted((SHIPPED_TRACES / "scaling").glob("*.json.gz"))]
    table = scaling_table([seven, *parts], min_sizes=2)
    fig = plot.scaling_figure(table)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["6.7B: 37.1%", "13B*: 32.5%", "69B*: 16.7%"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["6.7B", "13B", "69B"]
    hollow = [c for c in ax.collections if (c.get_gid() or "").endswith("|extrapolated")]
    assert all(len(c.get_offsets()) == 2 for c in hollow)
    lo, hi = ax.get_ylim()
    ys = 100 * np.concatenate([table["addressable_fraction"], table["gemm_attention_fraction"]])
    assert lo <= ys.min() and hi >= ys.max() and (hi - lo) < 100  # no empty 0-100% range
    assert any("extrapolated" in t.get_text() for t in ax.get_legend().get_texts())
