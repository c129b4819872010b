"""Reading traces: one trace, a directory of traces, the ranks of one run, two runs compared.

Every function here reads its paths as the trace-reading commands do, with a `ReadOptions` (`read=`)
standing for their --rules, --policy, --whole-trace, --window, --lenient and --no-cache flags.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Union

import pandas as pd

from headroom.errors import UserError
from headroom.projection.coverage import Coverage
from headroom.projection.coverage import coverage as _coverage
from headroom.projection.problems import load_problems
from headroom.report.diff import Diff
from headroom.report.diff import diff as _diff
from headroom.report.diff_html import html_diff
from headroom.report.page import check_html_output
from headroom.report.tables import summary_frame
from headroom.trace.analysis import Analysis, analyze_files
from headroom.trace.analysis import analyze as _analyze
from headroom.trace.classify import load_classifier
from headroom.trace.load import find_trace_files, load_trace
from headroom.trace.rank_set import RankSet, group_ranks, rank_set
from headroom.trace.read_options import ReadOptions

PathLike = Union[str, "os.PathLike[str]"]  # noqa: UP007  (a runtime alias with a quoted name: `|` cannot join it)
TraceLike = PathLike | Analysis
DEFAULT_READ = ReadOptions()


def analyze(trace: PathLike, read: ReadOptions = DEFAULT_READ) -> Analysis:
    """Classify where the time of one trace file went, as `headroom classify TRACE`.

    `read`: how the trace is read (`ReadOptions`: rules, policy, window, ...). Returns one `Analysis`
    (`.to_frame()`: per category). A directory is refused: `analyze_all` gives one Analysis per trace in
    it, `analyze_ranks` the ranks of one run together."""
    if os.path.isdir(trace):
        raise UserError(
            f"{trace} is a directory: headroom.analyze_all() analyses each trace in it, "
            f"headroom.analyze_ranks() the ranks of one run together"
        )
    return _analyze(
        trace,
        rules=read.rules,
        policy=read.policy,
        whole_trace=read.whole_trace,
        window=read.window,
        lenient=read.lenient,
        use_cache=read.use_cache,
        graph_source=read.graph_source,
    )


def analyze_all(path: PathLike, read: ReadOptions = DEFAULT_READ) -> list[Analysis]:
    """Every trace of a file or a directory (e.g. `traces/`, or one file per rank), rules read once, in
    file-name order (as `headroom classify PATH` reads them, each trace on its own): a list of `Analysis`."""
    rules, policy = load_classifier(read.rules, read.policy)
    source = (
        load_trace(read.graph_source, lenient=read.lenient, use_cache=read.use_cache)
        if read.graph_source is not None
        else None
    )  # read once for every trace
    return list(
        analyze_files(
            find_trace_files(path),
            rules=rules,
            policy=policy,
            whole_trace=read.whole_trace,
            window=read.window,
            lenient=read.lenient,
            use_cache=read.use_cache,
            graph_source=source,
        )
    )


def read_inputs(path: PathLike, read: ReadOptions = DEFAULT_READ) -> list[Analysis | RankSet]:
    """What the commands read from one path: a trace file's Analysis; a directory's traces, each an
    Analysis, or one RankSet when they are the ranks of one run (its caveats in `RankSet.warnings`)."""
    analyses = analyze_all(path, read)
    if not os.path.isdir(path):
        return list(analyses)
    inputs, _ = group_ranks(analyses, source=str(path))
    return inputs


def analyze_ranks(path: PathLike, read: ReadOptions = DEFAULT_READ) -> RankSet:
    """A directory holding the ranks of one run, analysed together (docs/distributed.md): a `RankSet`
    (`per_rank`, `categories`, `slowest_rank`, `step_us`: the synchronised step)."""
    return rank_set(analyze_all(path, read), source=str(path))


def summary(analyses: Sequence[Analysis]) -> pd.DataFrame:
    """One row per trace: the `headroom report` table, as a DataFrame."""
    return summary_frame(list(analyses))


def as_analysis(trace: TraceLike, read: ReadOptions = DEFAULT_READ) -> Analysis:
    """An Analysis as given, or the analysis of a trace file."""
    return trace if isinstance(trace, Analysis) else analyze(trace, read)


def coverage(
    traces: Sequence[TraceLike], suite: str = "dlrm", problems: PathLike | None = None, read: ReadOptions = DEFAULT_READ
) -> Coverage:
    """Which problems of a benchmark suite (`dlrm`: DLRM-Bench, `kernelbench`: KernelBench level 1) the
    traces exercise, as `headroom coverage`: a `Coverage` (per problem the traces it matches, its events,
    time and share of each trace's GPU time, and the problems none matches). A directory stands for every
    trace in it; `problems`: a TOML file of problem -> selector mappings (--problems)."""
    analyses: list[Analysis] = []
    for t in traces:
        if not isinstance(t, Analysis) and os.path.isdir(t):
            analyses.extend(analyze_all(t, read))
        else:
            analyses.append(as_analysis(t, read))
    return _coverage(analyses, suite=suite, problems=load_problems(problems))


def _one_run(trace: TraceLike | RankSet, read: ReadOptions) -> Analysis | RankSet:
    if isinstance(trace, (Analysis, RankSet)):
        return trace
    return analyze_ranks(trace, read) if os.path.isdir(trace) else analyze(trace, read)


def diff(
    before: TraceLike | RankSet, after: TraceLike | RankSet, by: str = "category", read: ReadOptions = DEFAULT_READ
) -> Diff:
    """Two runs of one workload compared, as `headroom diff` (a directory is the ranks of one run).

    `by`: the rows, by category, op, module or kernel. Returns a `Diff`: `.step` (the unprofiled step where
    both manifests record it, else the profiled one) with its `speedup`, `.rows` (before/after time per
    step, delta, share of the change, added/removed), `.waterfall()` (what the figure draws)."""
    return _diff(_one_run(before, read), _one_run(after, read), by=by)


def diff_html(
    before: TraceLike | RankSet,
    after: TraceLike | RankSet,
    out: PathLike,
    by: str = "category",
    read: ReadOptions = DEFAULT_READ,
) -> dict:
    """Write the `headroom diff --html` page of two runs to `out` and return its document (`diff --html
    --json`): the `diff` document (`step`, `profiled`, `unprofiled`, `rows`, ...) with `html` and `page`
    (`waterfall`: `Diff.waterfall()`'s bars in µs)."""
    check_html_output(out, [p for p in (before, after, read.rules, read.policy) if isinstance(p, (str, os.PathLike))])
    return html_diff(diff(before, after, by=by, read=read), out)
