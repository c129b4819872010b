"""Figures (matplotlib): drawing only.

Every number drawn comes from a table built elsewhere and passed in:
``targets.category_fractions``/``addressable_summary`` (addressable-fraction
figure), ``project.projection_table`` (projection chart) and
``targets.scaling_table`` (scaling chart). Each drawing function returns a
matplotlib Figure (made without pyplot: no global state, no GUI backend);
tests read the bars and labels back from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from headroom.errors import UserError
from headroom.trace.classify import category_group

FORMATS = ("png", "svg", "pdf")
# Non-addressable categories in greys, addressable ones in colour: the split is visible in print.
COLORS = {
    "gemm": "#3b3b3b", "attention": "#5e5e5e", "conv": "#818181", "communication": "#a3a3a3",
    "memory": "#c4c4c4", "idle": "#ffffff",
    "embedding": "#d62728", "elementwise": "#1f77b4", "normalization": "#2ca02c", "reduction": "#9467bd",
    "softmax": "#8c564b", "indexing": "#e377c2", "copy": "#17becf", "optimizer": "#bcbd22",
    "sort": "#ff7f0e", "fused": "#aec7e8", "other": "#98df8a",
}
_EXTRA = ["#ffbb78", "#c5b0d5", "#f7b6d2", "#dbdb8d", "#9edae5", "#c49c94"]
STYLE = {"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7,
         "xtick.labelsize": 7, "ytick.labelsize": 7, "svg.fonttype": "none", "pdf.fonttype": 42}
LABEL_MIN = 0.035  # segments narrower than this get no percentage inside


def _color(cat: str, k: int) -> str:
    return COLORS.get(cat, _EXTRA[k % len(_EXTRA)])


def addressable_figure(fractions: pd.DataFrame, summary: pd.DataFrame | None = None,
                       title: str = "Where the GPU time goes: addressable vs. vendor-library kernels",
                       basis: str = "kernel") -> Figure:
    """One horizontal stacked bar per workload, split by category.

    `fractions`: targets.category_fractions(); `summary`: targets.addressable_summary().
    Non-addressable categories come first (greys), addressable ones after them
    (colours, hatched, outlined), each segment labelled with its percentage and
    the addressable total written after the bar.
    """
    if len(fractions) == 0:
        raise UserError("nothing to plot: no categories")
    workloads = list(dict.fromkeys(fractions["workload"]))
    n = len(workloads)
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(7.0, 0.45 * n + 1.6))
        ax = fig.subplots()
        seen: dict[str, bool] = {}
        extra = 0
        for y, w in enumerate(workloads):
            rows = fractions[fractions["workload"] == w]
            left = 0.0
            addr_left = None
            for r in rows.itertuples(index=False):
                if r.category not in COLORS and r.category not in seen:
                    extra += 1
                color = _color(r.category, extra)
                bar = ax.barh(y, r.fraction, left=left, height=0.62, color=color,
                              edgecolor="#222222" if r.addressable else "#777777", linewidth=0.4,
                              hatch="///" if r.addressable else ("..." if r.category == "idle" else None),
                              label=r.category)
                bar.patches[0].set_gid(f"{w}|{r.category}|{'A' if r.addressable else 'N'}")
                if r.addressable and addr_left is None:
                    addr_left = left
                if r.fraction >= LABEL_MIN:
                    dark = (not r.addressable) and r.category in category_group("vendor")
                    ax.text(left + r.fraction / 2, y, f"{100 * r.fraction:.0f}%", ha="center", va="center",
                            fontsize=6.5, color="white" if dark else "black",
                            bbox=None if dark else dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.7))
                seen.setdefault(r.category, bool(r.addressable))
                left += r.fraction
            if summary is not None and len(summary):
                frac = float(summary.loc[summary["workload"] == w, "addressable_fraction"].sum())
            else:
                frac = float(rows.loc[rows["addressable"], "fraction"].sum())
            if addr_left is not None:
                # Outline the addressable span so it reads as one block.
                ax.barh(y, frac, left=addr_left, height=0.74, fill=False, edgecolor="black", linewidth=1.2,
                        gid=f"{w}|addressable-span")
            ax.text(max(left, 1.0) + 0.01, y, f"addressable {100 * frac:.1f}%", va="center", ha="left",
                    fontsize=7, fontweight="bold", gid=f"{w}|addressable-label")
        ax.set_yticks(range(n), workloads)
        ax.invert_yaxis()
        ax.set_xlim(0, 1.27)
        ax.set_xticks(np.linspace(0, 1, 6), [f"{int(x * 100)}%" for x in np.linspace(0, 1, 6)])
        ax.set_xlabel("share of GPU kernel time" if basis == "kernel" else "share of the profiled window (devices x wall)")
        ax.set_title(title)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        handles = [Patch(facecolor=_color(c, 0), edgecolor="#222222" if a else "#777777",
                         hatch="///" if a else None, label=c + (" *" if a else ""))
                   for c, a in sorted(seen.items(), key=lambda kv: (kv[1], kv[0]))]
        fig.tight_layout()
        # Legend under the x label, a fixed distance in inches whatever the number of bars.
        ax_h = ax.get_position().height * fig.get_figheight()
        ax.legend(handles=handles, ncol=min(6, len(handles)), loc="upper center",
                  bbox_to_anchor=(0.45, -0.5 / ax_h), frameon=False,
                  title="* addressable (hatched, outlined)", title_fontsize=7)
    return fig


def projection_figure(table: pd.DataFrame, title: str = "Projected step time") -> Figure:
    """Measured vs projected per-step time per workload (Amdahl and timeline replay).

    `table`: project.projection_table(). Bars are relative to each workload's measured
    step (100%), so workloads of different sizes share one axis; labels give the
    milliseconds and the change. Zero-time bounds are drawn as ticks.
    """
    if len(table) == 0:
        raise UserError("nothing to plot: no projections")
    n = len(table)
    series = [("baseline_ms", "measured", "#7f7f7f"), ("amdahl_ms", "Amdahl", "#1f77b4"),
              ("replay_ms", "timeline replay", "#d62728")]
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
        for k, (col, color) in enumerate((("amdahl_zero_ms", "#1f77b4"), ("replay_zero_ms", "#d62728"))):
            rel = 100 * table[col].to_numpy(dtype=float) / base
            ys = np.arange(n) + k * h
            ok = np.isfinite(rel)
            if ok.any():
                ax.plot(rel[ok], ys[ok], "|", color=color, markersize=9, mew=1.5,
                        label="selected kernels at zero time" if k == 0 else None)
        ax.set_yticks(range(n), table["workload"])
        ax.invert_yaxis()
        ax.set_xlim(0, 135)
        ax.set_xticks(range(0, 101, 20), [f"{x}%" for x in range(0, 101, 20)])
        ax.set_xlabel("time per step, % of measured")
        ax.set_title(title)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        ax.legend(loc="lower center", bbox_to_anchor=(0.45, 1.0 if n > 1 else 1.02), ncol=4, frameon=False)
        ax.set_title(title, pad=22)
        fig.tight_layout()
    return fig


def scaling_figure(table: pd.DataFrame, title: str = "Addressable fraction vs. model size") -> Figure:
    """Addressable fraction (and GEMM+attention share) against parameter count, log x.

    `table`: targets.scaling_table().
    """
    if len(table) < 2:
        raise UserError("the scaling chart needs traces of one family at two or more sizes")
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(4.5, 3.2))
        ax = fig.subplots()
        for k, (fam, g) in enumerate(table.groupby("family", sort=False)):
            g = g.sort_values("params")
            color = list(COLORS.values())[6 + k % 10]
            ax.plot(g["params"], 100 * g["addressable_fraction"], "o-", color=color,
                    label=f"{fam or 'workload'}: addressable", gid=f"{fam}|addressable")
            ax.plot(g["params"], 100 * g["gemm_attention_fraction"], "s--", color=color, alpha=0.5,
                    label=f"{fam or 'workload'}: GEMM + attention", gid=f"{fam}|gemm_attention")
            for x, y in zip(g["params"], g["addressable_fraction"]):
                ax.annotate(f"{human_count(x)}: {100 * y:.1f}%", (x, 100 * y), textcoords="offset points",
                            xytext=(4, 4), fontsize=6.5)
        ax.set_xscale("log")
        ax.set_xlabel("parameters")
        ax.set_ylabel("% of GPU kernel time")
        ax.set_ylim(0, 100)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        ax.legend(frameon=False)
        fig.tight_layout()
    return fig


def human_count(x: float) -> str:
    """6.74e9 -> '6.7B', 2.5e7 -> '25M'."""
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            v = x / div
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return f"{x:g}"


def save(fig: Figure, stem: str | Path, formats: Sequence[str] = FORMATS, dpi: int = 200) -> list[Path]:
    """Write the figure as stem.png/.svg/.pdf; returns the paths."""
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise UserError(f"unknown format(s) {', '.join(bad)} (png, svg, pdf)")
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for f in formats:
        p = stem.with_suffix(f".{f}")
        fig.savefig(p, dpi=dpi, bbox_inches="tight")
        out.append(p)
    return out
