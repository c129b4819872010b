"""The figures of `headroom plot` (and `headroom.plot`): drawn from analyses, then written.

    plots = draw_figures(analyses, entries=entries)       # every figure computed, nothing written yet
    plots.files = save_figures(plots, "out/plots")        # FIGURE.png/.svg/.pdf (and FIGURE.json)

Every figure is computed before any is written: a bad speedup (found while projecting) or a scaling
chart that cannot be drawn leaves the output directory as it was. matplotlib is imported when drawing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.files import check_output_dir, check_output_not_input
from headroom.projection.problems import ProblemMap
from headroom.projection.project import project
from headroom.projection.speedups import Speedup, parse_cli_speedup
from headroom.trace.analysis import Analysis
from headroom.trace.load import is_trace_name

FIGURES = ("addressable", "projection", "scaling")
ALL_FORMATS = ("png", "svg", "pdf")  # headroom.report.figure_files.FORMATS
# What the projection chart projects when no speedup is given.
DEFAULT_PROJECTION = "category:addressable=1.5"


@dataclass
class Plots:
    """The figures drawn: `figures` (name -> matplotlib Figure), `numbers` (name -> the document of the numbers
    it draws, when asked for), `files` (what was written), `warnings` (projection warnings, a chart left out)."""

    figures: dict[str, Any] = field(default_factory=dict)
    numbers: dict[str, dict] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check_plot_outputs(
    out: str | os.PathLike,
    figures: Sequence[str] | None,
    formats: Sequence[str] | None,
    numbers: bool,
    inputs: Sequence[str | os.PathLike | None],
) -> None:
    """Refuse, before any work, an output directory that cannot be written or a file it would write over
    one the command reads (a FIGURE.json left among the traces would be read as a trace next time)."""
    for name in figures or FIGURES:
        for suffix in (*(formats or ALL_FORMATS), *(("json",) if numbers else ())):
            check_output_not_input(Path(out) / f"{name}.{suffix}", inputs, reads=is_trace_name)
    check_output_dir(out)


def draw_figures(
    analyses: Sequence[Analysis],
    figures: Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
    entries: Sequence[Speedup] = (),
    entry_warnings: Sequence[str] = (),
    params: Sequence[float] | None = None,
    family: str | None = None,
    basis: str = "wall",
    numbers: bool = False,
    problems: ProblemMap | None = None,
) -> Plots:
    """Draw `figures` (default: all that apply) of `analyses`, one bar per trace (`labels`: their names)."""
    unknown = [f for f in figures or () if f not in FIGURES]
    if unknown:
        raise UserError(f"unknown figure(s) {', '.join(unknown)} ({', '.join(FIGURES)})")
    if labels is not None and len(labels) != len(analyses):
        raise UserError(f"--label given {len(labels)} time(s) for {len(analyses)} trace(s)")
    if params and len(params) != len(analyses):
        raise UserError(f"--params given {len(params)} time(s) for {len(analyses)} trace(s)")
    want = list(figures or FIGURES)
    plots = Plots()
    if "addressable" in want:
        _addressable(plots, analyses, labels, basis, numbers)
    if "projection" in want:
        _projection(plots, analyses, labels, entries, entry_warnings, numbers, problems)
    if "scaling" in want:
        _scaling(plots, analyses, labels, params, family, numbers, explicit=bool(figures and "scaling" in figures))
    return plots


def _addressable(
    plots: Plots, analyses: Sequence[Analysis], labels: Sequence[str] | None, basis: str, numbers: bool
) -> None:
    from headroom.report import figure_files, plot
    from headroom.report.tables import addressable_summary, category_fractions

    cpu_only = [a.source for a in analyses if a.mode != "gpu"]
    if cpu_only and len(cpu_only) < len(analyses):
        # One chart of GPU time and CPU time side by side would compare unlike things.
        raise UserError(
            f"{cpu_only[0]}: a CPU-only trace (no GPU activity) among GPU traces: plot them "
            f"separately (the addressable chart is of GPU time, or of CPU op time when all are CPU-only)"
        )
    fractions = category_fractions(analyses, labels, basis)
    summary = addressable_summary(analyses, labels, basis)
    plots.figures["addressable"] = plot.addressable_figure(
        fractions, summary, basis=basis, cpu_only=len(cpu_only) == len(analyses)
    )
    if numbers:
        plots.numbers["addressable"] = figure_files.addressable_numbers(
            fractions, summary, basis, [a.source for a in analyses]
        )


def _projection(
    plots: Plots,
    analyses: Sequence[Analysis],
    labels: Sequence[str] | None,
    entries: Sequence[Speedup],
    entry_warnings: Sequence[str],
    numbers: bool,
    problems: ProblemMap | None,
) -> None:
    from headroom.report import figure_files, plot
    from headroom.report.tables import projection_table

    title = "Projected step time"
    used = list(entries)
    if not used:
        used = [parse_cli_speedup(DEFAULT_PROJECTION)]
        title += " (every addressable kernel 1.5x faster)"
    results = [project(a, used, problems=problems, extra_warnings=list(entry_warnings)) for a in analyses]
    plots.warnings += [f"{r.source}: {w}" for r in results for w in r.warnings]
    table = projection_table(results, [*(labels or [])] or [a.label for a in analyses])
    plots.figures["projection"] = plot.projection_figure(table, title)
    if numbers:
        plots.numbers["projection"] = figure_files.table_numbers("projection", table, [a.source for a in analyses])


def _scaling(
    plots: Plots,
    analyses: Sequence[Analysis],
    labels: Sequence[str] | None,
    params: Sequence[float] | None,
    family: str | None,
    numbers: bool,
    explicit: bool,
) -> None:
    from headroom.report import figure_files, plot
    from headroom.report.scaling import scaling_table

    table = scaling_table(analyses, params=params, labels=labels, family=family, skip_missing=not explicit, min_sizes=2)
    if len(table) >= 2:
        plots.figures["scaling"] = plot.scaling_figure(table)
        if numbers:
            plots.numbers["scaling"] = figure_files.table_numbers("scaling", table, [a.source for a in analyses])
    elif explicit:
        raise UserError(
            "the scaling chart needs traces of one family at two or more sizes "
            "(parameter counts from the manifests or --params)"
        )
    else:
        plots.warnings.append("no scaling chart (it needs traces of one family at two or more sizes)")


def save_figures(plots: Plots, out: str | os.PathLike, formats: Sequence[str] | None = None) -> list[Path]:
    """Write each figure as OUT/NAME.png/.svg/.pdf (`formats`: default all three), and OUT/NAME.json when
    its numbers were drawn; returns the paths written, in order."""
    from headroom.report.figure_files import save

    written: list[Path] = []
    for name, fig in plots.figures.items():
        written += save(
            fig, Path(out) / name, tuple(dict.fromkeys(formats or ALL_FORMATS)), numbers=plots.numbers.get(name)
        )
    return written
