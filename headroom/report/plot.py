"""Figures (matplotlib): drawing only.

Every number drawn comes from a table built elsewhere and passed in:
``targets.category_fractions``/``addressable_summary`` (addressable-fraction
figure), ``project.projection_table`` (projection chart) and
``targets.scaling_table`` (scaling chart). Each drawing function returns a
matplotlib Figure (made without pyplot: no global state, no GUI backend);
tests read the bars and labels back from it.
"""

from __future__ import annotations

from typing import Any

import matplotlib
import matplotlib.ticker
import numpy as np
import pandas as pd
from matplotlib import patheffects
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from headroom.errors import UserError
from headroom.report.colors import COLORS
from headroom.report.colors import color as _color

# Idle is white with a dotted hatch (headroom/report/colors.py: the colours).
STYLE: dict[Any, Any] = {
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "svg.fonttype": "none",
    "pdf.fonttype": 42,
    "svg.hashsalt": "headroom",
    "path.simplify": False,
}
LABEL_MIN = 0.035  # segments narrower than this get no percentage inside
BASIS_AXIS = {
    "kernel": "share of GPU kernel time (idle not shown)",
    "wall": "share of the profiled wall time (devices x window), idle included",
}


def addressable_figure(
    fractions: pd.DataFrame,
    summary: pd.DataFrame | None = None,
    title: str | None = None,
    basis: str = "kernel",
    cpu_only: bool = False,
) -> Figure:
    """One horizontal stacked bar per workload, split by category.

    `fractions`: targets.category_fractions(); `summary`: targets.addressable_summary();
    `cpu_only`: every trace is CPU-only (their units are CPU operators, and the title says so).
    Non-addressable categories come first (greys), addressable ones after them
    (colours, hatched, outlined), each segment labelled with its percentage and
    the addressable total written after the bar.
    """
    if len(fractions) == 0:
        raise UserError("nothing to plot: no categories")
    if title is None and cpu_only:
        # `headroom profile` on a machine without a GPU: the units are CPU operators' self times.
        title = "Where the CPU time goes (CPU-only traces: no GPU activity)\n" + (
            "(share of CPU operator self time)"
            if basis == "kernel"
            else "(share of the profiled wall time, idle included)"
        )
    if title is None:
        title = "Where the GPU time goes: addressable vs. vendor-library kernels\n" + (
            "(share of GPU kernel time; idle not shown)"
            if basis == "kernel"
            else "(share of the profiled wall time, idle included)"
        )
    workloads = list(dict.fromkeys(fractions["workload"]))
    n = len(workloads)
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(7.0, 0.45 * n + 1.6))
        ax = fig.subplots()
        seen: dict[str, bool] = {}
        extra = 0
        for y, w in enumerate(workloads):
            rows = fractions[fractions["workload"] == w]
            left, addr_left, extra = _stacked_bar(ax, y, w, rows, seen, extra)
            _addressable_total(ax, y, w, rows, summary, basis, cpu_only, left, addr_left)
        ax.set_yticks(range(n), workloads)
        ax.invert_yaxis()
        ax.set_xlim(0, 1.27)
        ax.set_xticks(np.linspace(0, 1, 6), [f"{int(x * 100)}%" for x in np.linspace(0, 1, 6)])
        ax.set_xlabel(
            "share of CPU operator self time" if cpu_only and basis == "kernel" else BASIS_AXIS.get(basis, basis)
        )
        ax.set_title(title)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        _category_legend(fig, ax, fractions, seen)
    return fig


def _stacked_bar(
    ax: Any, y: int, w: str, rows: pd.DataFrame, seen: dict[str, bool], extra: int
) -> tuple[float, float | None, int]:
    """One workload's bar, a segment per category (labelled when wide enough); returns where it ends, where
    its first addressable segment starts, and the count of categories without a colour of their own so far."""
    left = 0.0
    addr_left = None
    for r in rows.itertuples(index=False):
        if r.category not in COLORS and r.category not in seen:
            extra += 1
        color = _color(r.category, extra)
        bar = ax.barh(
            y,
            r.fraction,
            left=left,
            height=0.62,
            color=color,
            edgecolor="#222222" if r.addressable else "#777777",
            linewidth=0.4,
            hatch="///" if r.addressable else ("..." if r.category == "idle" else None),
            label=r.category,
        )
        bar.patches[0].set_gid(f"{w}|{r.category}|{'A' if r.addressable else 'N'}")
        if r.addressable and addr_left is None:
            addr_left = left
        if r.fraction >= LABEL_MIN:
            dark = matplotlib.colors.to_rgb(color) < (0.5, 0.5, 0.5)  # white text on dark greys
            ax.text(
                left + r.fraction / 2,
                y,
                f"{100 * r.fraction:.0f}%",
                ha="center",
                va="center",
                fontsize=6.5,
                color="white" if dark else "black",
                bbox=None if dark else dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.7),
            )
        seen.setdefault(r.category, bool(r.addressable))
        left += r.fraction
    return left, addr_left, extra


def _addressable_total(
    ax: Any,
    y: int,
    w: str,
    rows: pd.DataFrame,
    summary: pd.DataFrame | None,
    basis: str,
    cpu_only: bool,
    left: float,
    addr_left: float | None,
) -> None:
    """The addressable span outlined as one block, and its share written after the bar."""
    kernel_frac = None
    if summary is not None and len(summary):
        mine = summary.loc[summary["workload"] == w]
        frac = float(mine["addressable_fraction"].sum())
        if basis == "wall" and "kernel_fraction" in summary.columns:
            kernel_frac = float(mine["kernel_fraction"].sum())
    else:
        frac = float(rows.loc[rows["addressable"], "fraction"].sum())
    if addr_left is not None:
        # Outline the addressable span so it reads as one block.
        ax.barh(
            y,
            frac,
            left=addr_left,
            height=0.74,
            fill=False,
            edgecolor="black",
            linewidth=1.2,
            gid=f"{w}|addressable-span",
        )
    # On wall shares, also the share of GPU time: the number `report` prints for the same trace.
    label = f"addressable {100 * frac:.1f}%" + (
        f" of wall\n({100 * kernel_frac:.1f}% of {'CPU op' if cpu_only else 'GPU'} time)"
        if kernel_frac is not None
        else ""
    )
    ax.text(
        max(left, 1.0) + 0.01,
        y,
        label,
        va="center",
        ha="left",
        fontsize=7 if kernel_frac is None else 6,
        fontweight="bold",
        gid=f"{w}|addressable-label",
    )


def _category_legend(fig: Figure, ax: Any, fractions: pd.DataFrame, seen: dict[str, bool]) -> None:
    # The legend lists the categories in the order the bars stack them, read left to right, row by
    # row (matplotlib fills legend columns first: hand it the entries in that order).
    if "stack" in fractions.columns:
        rank = fractions.groupby("category")["stack"].min()
        seen = dict(sorted(seen.items(), key=lambda kv: rank.get(kv[0], 0)))
    handles = [
        Patch(
            facecolor=_color(c, 0),
            edgecolor="#222222" if a else "#777777",
            hatch="///" if a else ("..." if c == "idle" else None),
            label=c + (" *" if a else ""),
        )
        for c, a in seen.items()
    ]
    ncol = min(6, len(handles))
    nrows = -(-len(handles) // ncol)
    handles = [handles[r * ncol + c] for c in range(ncol) for r in range(nrows) if r * ncol + c < len(handles)]
    fig.tight_layout()
    # Legend under the x label, a fixed distance in inches whatever the number of bars.
    ax_h = ax.get_position().height * fig.get_figheight()
    ax.legend(
        handles=handles,
        ncol=ncol,
        loc="upper center",
        bbox_to_anchor=(0.45, -0.5 / ax_h),
        frameon=False,
        title="* addressable (hatched, outlined)",
        title_fontsize=7,
    )


def projection_figure(table: pd.DataFrame, title: str = "Projected step time") -> Figure:
    """Measured vs projected per-step time per workload (Amdahl and timeline replay).

    `table`: project.projection_table(). Bars are relative to each workload's baseline
    step (100%: the unprofiled step where known, as `headroom project` leads with), so workloads
    of different sizes share one axis; labels give the milliseconds and the change. Zero-time
    bounds are drawn as ticks.
    """
    if len(table) == 0:
        raise UserError("nothing to plot: no projections")
    n = len(table)
    clocks = set(table["clock"]) if "clock" in table.columns else {"profiled"}
    base_name = {frozenset({"unprofiled"}): "unprofiled step", frozenset({"profiled"}): "measured step"}.get(
        frozenset(clocks), "baseline (the unprofiled step where known)"
    )
    series = [
        ("baseline_ms", base_name, "#7f7f7f"),
        ("amdahl_ms", "Amdahl", "#1f77b4"),
        ("replay_ms", "timeline replay", "#d62728"),
    ]
    base = table["baseline_ms"].to_numpy(dtype=float)
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(7.0, 0.75 * n + 1.5))
        ax = fig.subplots()
        h = 0.26
        for k, (col, label, color) in enumerate(series):
            vals = table[col].to_numpy(dtype=float)
            rel = 100 * vals / base
            ys = np.arange(n) + (k - 1) * h
            bars = ax.barh(ys, np.nan_to_num(rel), height=h, color=color, label=label)
            for b, w in zip(bars.patches, table["workload"]):
                b.set_gid(f"{w}|{col}")
            for y, v, r, b0, wl in zip(ys, vals, rel, base, table["workload"]):
                if not np.isfinite(v):
                    continue
                change = round(100 * (v / b0 - 1), 2) + 0.0
                txt = f"{v:,.2f} ms" if col == "baseline_ms" else f"{v:,.2f} ms ({change:+.2f}%)"
                ax.text(r, y, " " + txt, va="center", ha="left", fontsize=6.5, gid=f"{wl}|{col}|label")
        # Zero-time bounds: black ticks with a white halo, drawn over the bars (a tick in the bar's
        # own colour would be invisible on it).
        halo = [patheffects.Stroke(linewidth=3.5, foreground="white"), patheffects.Normal()]
        for k, col in enumerate(("amdahl_zero_ms", "replay_zero_ms")):
            rel = 100 * table[col].to_numpy(dtype=float) / base
            ys = np.arange(n) + k * h
            ok = np.isfinite(rel)
            if ok.any():
                ax.plot(
                    rel[ok],
                    ys[ok],
                    "|",
                    color="black",
                    markersize=11,
                    mew=1.6,
                    zorder=5,
                    path_effects=halo,
                    gid=f"{col}|ticks",
                    label="selected kernels at zero time" if k == 0 else None,
                )
        ax.set_yticks(range(n), table["workload"])
        ax.invert_yaxis()
        lo = np.nanmin(
            np.concatenate(
                [
                    100 * table[c].to_numpy(dtype=float) / base
                    for c in ("amdahl_zero_ms", "replay_zero_ms", "amdahl_ms", "replay_ms")
                ]
            )
        )
        ax.set_xlim(max(0.0, 10 * np.floor(lo / 10) - 10) if np.isfinite(lo) else 0.0, 135)
        ticks = [x for x in range(0, 101, 10 if ax.get_xlim()[0] >= 50 else 20) if x >= ax.get_xlim()[0]]
        ax.set_xticks(ticks, [f"{x}%" for x in ticks])
        ax.set_xlabel(f"time per step, % of the {base_name}")
        ax.set_title(title)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        ax.legend(loc="lower center", bbox_to_anchor=(0.45, 1.0 if n > 1 else 1.02), ncol=4, frameon=False)
        ax.set_title(title, pad=22)
        fig.tight_layout()
    return fig


def scaling_figure(table: pd.DataFrame, title: str = "Addressable fraction vs. model size") -> Figure:
    """Addressable fraction (and GEMM+attention share) against parameter count, log x.

    `table`: report.scaling.scaling_table(). Each point is labelled with its model size;
    points extrapolated from a run of some of the blocks (`--layers`) are hollow and starred.
    The y axis spans the data (with a margin), not 0-100%.
    """
    if len(table) < 2:
        raise UserError("the scaling chart needs traces of one family at two or more sizes")
    ext_col = table["extrapolated"] if "extrapolated" in table.columns else pd.Series(False, index=table.index)
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(4.8, 3.4))
        ax = fig.subplots()
        ys_all = []
        for k, (fam, g) in enumerate(table.groupby("family", sort=False)):
            g = g.sort_values("params")
            color = list(COLORS.values())[6 + k % 10]
            ys_all.extend(_scaling_family(ax, fam, g, ext_col.loc[g.index].to_numpy(dtype=bool), color))
        ax.set_xscale("log")
        lo, hi = min(ys_all), max(ys_all)
        pad = max(5.0, 0.1 * (hi - lo))
        ax.set_ylim(max(0.0, lo - pad - 5), min(100.0, hi + pad))
        xs = table["params"].to_numpy(dtype=float)
        ax.set_xlim(xs.min() / 1.6, xs.max() * 1.6)
        sizes = sorted(set(xs))
        ax.set_xticks(sizes, [human_count(x) for x in sizes])  # the model sizes, not powers of ten
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("parameters")
        ax.set_ylabel("% of GPU kernel time")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        handles, _ = ax.get_legend_handles_labels()
        if ext_col.any():
            handles.append(
                Line2D(
                    [],
                    [],
                    marker="o",
                    linestyle="",
                    markerfacecolor="white",
                    color="#555555",
                    label="* extrapolated from some of the blocks",
                )
            )
        ax.legend(handles=handles, frameon=False, loc="best")
        fig.tight_layout()
    return fig


def _scaling_family(ax: Any, fam: str, g: pd.DataFrame, ext: np.ndarray, color: str) -> list[float]:
    """One family's lines and points on the scaling chart (hollow where extrapolated), each point labelled with its
    model size; returns the y values drawn."""
    ys_all: list[float] = []
    for col, marker, style, what in (
        ("addressable_fraction", "o", "-", "addressable"),
        ("gemm_attention_fraction", "s", "--", "gemm_attention"),
    ):
        y = 100 * g[col].to_numpy(dtype=float)
        ys_all.extend(y)
        ax.plot(
            g["params"],
            y,
            style,
            color=color,
            alpha=1.0 if what == "addressable" else 0.5,
            label=f"{fam or 'workload'}: {'addressable' if what == 'addressable' else 'GEMM + attention'}",
            gid=f"{fam}|{what}",
        )
        ax.scatter(
            g["params"][~ext],
            y[~ext],
            marker=marker,
            color=color,
            zorder=3,
            alpha=1.0 if what == "addressable" else 0.5,
        )
        ax.scatter(
            g["params"][ext],
            y[ext],
            marker=marker,
            facecolors="white",
            edgecolors=color,
            zorder=3,
            linewidths=1.2,
            gid=f"{fam}|{what}|extrapolated",
        )
    for x, y, e in zip(g["params"], g["addressable_fraction"], ext):
        ax.annotate(
            f"{human_count(x)}{'*' if e else ''}: {100 * y:.1f}%",
            (x, 100 * y),
            textcoords="offset points",
            xytext=(0, -12),
            ha="center",
            fontsize=6.5,
            gid=f"{fam}|label|{human_count(x)}",
        )
    return ys_all


def human_count(x: float) -> str:
    """6.74e9 -> '6.7B', 2.5e7 -> '25M'."""
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            v = x / div
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return f"{x:g}"


def waterfall_figure(table: pd.DataFrame, title: str = "Where the step time changed") -> Figure:
    """The step before, each row's change, the step after: `table` is `Diff.waterfall()` (label, kind
    start|delta|end, start_ms, delta_ms). Savings are drawn in one colour, losses in another."""
    if len(table) == 0:
        raise UserError("nothing to plot: no rows")
    colors = {"start": "#7f7f7f", "end": "#7f7f7f"}
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(7.0, 0.3 * len(table) + 1.2))
        ax = fig.subplots()
        for y, r in enumerate(table.itertuples(index=False)):
            color = colors.get(r.kind, "#2ca02c" if r.delta_ms < 0 else "#d62728")
            bar = ax.barh(y, r.delta_ms, left=r.start_ms, height=0.6, color=color)
            bar.patches[0].set_gid(f"{r.label}|{r.kind}")
            end = max(r.start_ms, r.start_ms + r.delta_ms)
            text = f"{r.delta_ms:,.2f} ms" if r.kind != "delta" else f"{r.delta_ms:+,.3f} ms"
            ax.text(end, y, " " + text, va="center", ha="left", fontsize=6.5)
        ax.set_yticks(range(len(table)), [str(x)[:48] for x in table["label"]])
        ax.invert_yaxis()
        # The axis spans the levels the deltas move between (the start and end bars run off its left edge).
        levels = np.concatenate(
            [
                table["start_ms"].where(table["kind"] == "delta").dropna().to_numpy(),
                (table["start_ms"] + table["delta_ms"]).to_numpy(),
            ]
        )
        lo, hi = float(levels.min()), float(levels.max())
        pad = max(0.15 * (hi - lo), 0.01 * hi)
        ax.set_xlim(max(0.0, lo - pad), hi + 2 * pad)
        ax.set_xlabel("time per step (ms), profiled")
        ax.set_title(title)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        fig.tight_layout()
    return fig
