"""Reports and figures: the `headroom report --html` page and the `headroom plot` figures."""

from __future__ import annotations

import os
from collections.abc import Sequence

from headroom.api.traces import DEFAULT_READ, PathLike, analyze_all
from headroom.projection.problems import load_problems
from headroom.projection.speedups import collect_entries
from headroom.projection.targets import DEFAULT_SPEEDUP
from headroom.report.figures import Plots, check_plot_outputs, draw_figures, save_figures
from headroom.report.page import DEFAULT_TOP, check_html_output, html_report
from headroom.trace.analysis import Analysis, analyze_files
from headroom.trace.classify import load_classifier
from headroom.trace.load import find_trace_files
from headroom.trace.rank_set import RankSet, rank_order, rank_set
from headroom.trace.read_options import ReadOptions


def report_html(
    paths: Sequence[PathLike | Analysis | RankSet],
    out: PathLike,
    speedup: Sequence[str] = (),
    files: Sequence[PathLike] = (),
    target_speedup: float = DEFAULT_SPEEDUP,
    top: int = DEFAULT_TOP,
    problems: PathLike | None = None,
    roofline: bool = False,
    peaks: str | None = None,
    read: ReadOptions = DEFAULT_READ,
) -> dict:
    """Write the `headroom report --html` page of traces, directories (a directory of the ranks of one run
    is one rank set) or analyses to `out`, and return its document (`report --html --json`): `traces`,
    `rank_sets`, `html`, `page` (`categories`, `targets` ranked at `target_speedup`, the first `top` per
    grouping (`roofline`: each trace's with the roofline columns, against `peaks` or its GPU), `projections`
    of `speedup`/`files` entries, `ranks`)."""
    check_html_output(
        out, [*(p for p in paths if isinstance(p, (str, os.PathLike))), read.rules, read.policy, problems, *files]
    )
    entries, warnings = collect_entries(speedup, files)
    rules, policy = load_classifier(read.rules, read.policy)
    analyses, rank_sets = [], []
    for item in paths:
        if isinstance(item, Analysis):
            analyses.append(item)
        elif isinstance(item, RankSet):
            rank_sets.append(item)
        else:
            found = list(
                analyze_files(
                    find_trace_files(item),
                    rules=rules,
                    policy=policy,
                    whole_trace=read.whole_trace,
                    window=read.window,
                    lenient=read.lenient,
                    use_cache=read.use_cache,
                )
            )
            order = rank_order(found) if os.path.isdir(item) else None
            if order is not None:
                rank_sets.append(rank_set(found, order, source=str(item)))
            else:
                analyses.extend(found)
    return html_report(
        analyses,
        rank_sets,
        out,
        entries,
        warnings,
        target_speedup=target_speedup,
        top=top,
        problems=load_problems(problems),
        roofline=roofline,
        peaks=peaks,
    )


def plot(
    traces: Sequence[PathLike | Analysis],
    out: PathLike | None = "out/plots",
    figures: Sequence[str] | None = None,
    formats: Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
    speedup: Sequence[str] = (),
    files: Sequence[PathLike] = (),
    params: Sequence[float] | None = None,
    family: str | None = None,
    basis: str = "wall",
    numbers: bool = False,
    problems: PathLike | None = None,
    read: ReadOptions = DEFAULT_READ,
) -> Plots:
    """Draw the `headroom plot` figures of traces (files, directories: one bar per trace; or analyses).

    `figures`: addressable (the addressable fraction per workload), projection (measured against projected
    step time of `speedup`/`files` entries, default every addressable kernel 1.5x faster), scaling (the
    addressable fraction against model size, `params`/`family`); default all that apply. `basis`: wall (shares
    of the profiled window, idle shown) or kernel (of GPU kernel time). `out`: written there as
    FIGURE.png/.svg/.pdf (`formats`: default all three; `numbers`: also FIGURE.json, the numbers drawn), as
    `headroom plot --out`; None writes nothing. Returns `Plots`: `.figures` (name -> matplotlib Figure),
    `.numbers`, `.files` written, `.warnings`."""
    entries, entry_warnings = collect_entries(speedup, [os.fspath(f) for f in files])
    problem_map = load_problems(problems)
    paths = [t for t in traces if not isinstance(t, Analysis)]
    if out is not None:
        check_plot_outputs(out, figures, formats, numbers, [*paths, read.rules, read.policy, problems, *files])
    analyses = [a for t in traces for a in ([t] if isinstance(t, Analysis) else analyze_all(t, read))]
    plots = draw_figures(
        analyses, figures, labels, entries, entry_warnings, params, family, basis, numbers, problem_map
    )
    if out is not None:
        plots.files = save_figures(plots, out, formats)
    return plots
