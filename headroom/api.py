"""The Python API in one place: what `import headroom` offers notebooks and scripts.

    import headroom
    a = headroom.analyze("traces/dlrm.train.json.gz")
    a.to_frame()                                             # where the time went, per category
    r = headroom.project(a, speedup=["category:embedding=1.552"])
    r.to_frame()                                             # Amdahl and replay, per scenario
    headroom.targets(a).to_frame()                           # ops and modules ranked by end-to-end gain
    headroom.report_html(["traces/"], "report.html")         # the `headroom report --html` page
    headroom.diff_html("before.json.gz", "after.json.gz", "diff.html")   # the `headroom diff --html` page
    headroom.coverage(["traces/"], suite="dlrm").to_frame()   # which DLRM-Bench problems the traces exercise

Each function takes a trace path or an `Analysis`; the CLI calls the same modules.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Union

import pandas as pd

from headroom.errors import UserError
from headroom.projection.coverage import Coverage
from headroom.projection.coverage import coverage as _coverage
from headroom.projection.distributions import Distribution, load_distribution
from headroom.projection.overhead import check_step_ms
from headroom.projection.problems import load_problems
from headroom.projection.project import Prediction, ProjectResult
from headroom.projection.project import predict as _predict
from headroom.projection.project import project as _project
from headroom.projection.roofline import roofline_targets
from headroom.projection.scenarios import DEFAULT_QUANTILES
from headroom.projection.speedups import collect_entries
from headroom.projection.sync_projection import RanksProjection
from headroom.projection.sync_projection import project_ranks as _project_ranks
from headroom.projection.targets import DEFAULT_SPEEDUP, Targets, rank_targets
from headroom.report.diff import Diff
from headroom.report.diff import diff as _diff
from headroom.report.diff_html import html_diff
from headroom.report.page import DEFAULT_TOP, check_html_output, html_report
from headroom.report.tables import summary_frame
from headroom.trace.analysis import Analysis, analyze_files
from headroom.trace.analysis import analyze as _analyze
from headroom.trace.classify import load_classifier
from headroom.trace.load import find_trace_files
from headroom.trace.rank_set import RankSet, group_ranks, rank_order, rank_set

TraceLike = Union[str, "os.PathLike[str]", Analysis]
PathLike = Union[str, "os.PathLike[str]"]


def analyze(trace: PathLike, rules: PathLike | None = None, policy: PathLike | None = None,
            whole_trace: bool = False, window: str | None = None, lenient: bool = False,
            use_cache: bool = True) -> Analysis:
    """Classify where the time of one trace file went: always one `Analysis` (`rules`/`policy`: user TOML
    files, as --rules/--policy; `window`: steps by a range name, as --window; `lenient`, `use_cache`: as
    --lenient, --no-cache). A directory is refused: `analyze_all` gives one Analysis per trace in it,
    `analyze_ranks` the ranks of one run together."""
    if os.path.isdir(trace):
        raise UserError(f"{trace} is a directory: headroom.analyze_all() analyses each trace in it, "
                        f"headroom.analyze_ranks() the ranks of one run together")
    return _analyze(trace, rules=rules, policy=policy, whole_trace=whole_trace, window=window, lenient=lenient,
                    use_cache=use_cache)


def analyze_all(path: PathLike, rules: PathLike | None = None, policy: PathLike | None = None,
                whole_trace: bool = False, window: str | None = None, lenient: bool = False,
                use_cache: bool = True) -> list[Analysis]:
    """Every trace of a file or a directory (e.g. `traces/`, or one file per rank), rules read once, in
    file-name order (as `headroom classify PATH` reads them, each trace on its own)."""
    r, p = load_classifier(rules, policy)
    return list(analyze_files(find_trace_files(path), rules=r, policy=p, whole_trace=whole_trace, window=window,
                              lenient=lenient, use_cache=use_cache))


def read_inputs(path: PathLike, rules: PathLike | None = None, policy: PathLike | None = None,
                whole_trace: bool = False, window: str | None = None, lenient: bool = False,
                use_cache: bool = True) -> list[Analysis | RankSet]:
    """What the commands read from one path: a trace file's Analysis; a directory's traces, each an
    Analysis, or one RankSet when they are the ranks of one run (its caveats in `RankSet.warnings`)."""
    analyses = analyze_all(path, rules, policy, whole_trace, window, lenient, use_cache)
    if not os.path.isdir(path):
        return list(analyses)
    inputs, _ = group_ranks(analyses, source=str(path))
    return inputs


def summary(analyses: Sequence[Analysis]) -> pd.DataFrame:
    """One row per trace: the `headroom report` table."""
    return summary_frame(list(analyses))


def _analysis(trace: TraceLike) -> Analysis:
    return trace if isinstance(trace, Analysis) else analyze(trace)


def project(trace: TraceLike | RankSet, speedup: Sequence[str] = (), files: Sequence[PathLike] = (),
            distribution: PathLike | Distribution | None = None, win_rate: float | None = None,
            median: float | None = None, select: str = "category:addressable",
            quantiles: Sequence[float] = DEFAULT_QUANTILES, strict: bool = False,
            problems: PathLike | None = None, step_ms: float | None = None,
            on_ranks: Sequence[int] | None = None, rules: PathLike | None = None, policy: PathLike | None = None,
            whole_trace: bool = False, window: str | None = None, lenient: bool = False,
            use_cache: bool = True) -> ProjectResult | RanksProjection | list[ProjectResult | RanksProjection]:
    """End-to-end projections (Amdahl and timeline replay, with the zero-time bound), as `headroom project`;
    `.estimate` is the first scenario's best estimate with its interval.

    What it returns follows what it is given, as the command's output does: a trace file or an `Analysis`
    gives one `ProjectResult`; a `RankSet` one `RanksProjection` (through the collectives, as
    `project_ranks`); a directory a list, one result per trace in it, or one `RanksProjection` when it
    holds the ranks of one run (one per JSON document `headroom project DIR --json` prints).

    `speedup`: ``SELECTOR=FACTOR[,launches=N]`` texts (``--speedup``); `files`: speedup files or `headroom
    verify` output (``--speedups``); `distribution`, `win_rate`/`median`, `select`: the distribution
    scenarios; `step_ms`: the unprofiled step time (``--step-ms``; default: the trace's manifest);
    `on_ranks`: for ranks, the ranks the speedups apply on (``--on-rank``); `rules` .. `use_cache`: how a
    path is read, as `analyze`.
    """
    if isinstance(trace, (Analysis, RankSet)):
        inputs: list[Analysis | RankSet] = [trace]
    elif os.path.isdir(trace):
        inputs = read_inputs(trace, rules, policy, whole_trace, window, lenient, use_cache)
    else:
        inputs = [analyze(trace, rules, policy, whole_trace, window, lenient, use_cache)]
    results = [_project_one(a, speedup, files, distribution, win_rate, median, select, quantiles, strict,
                            problems, step_ms, on_ranks) for a in inputs]
    return results if not isinstance(trace, (Analysis, RankSet)) and os.path.isdir(trace) else results[0]


def _project_one(a: Analysis | RankSet, speedup: Sequence[str] = (), files: Sequence[PathLike] = (),
                 distribution: PathLike | Distribution | None = None, win_rate: float | None = None,
                 median: float | None = None, select: str = "category:addressable",
                 quantiles: Sequence[float] = DEFAULT_QUANTILES, strict: bool = False,
                 problems: PathLike | None = None, step_ms: float | None = None,
                 on_ranks: Sequence[int] | None = None) -> ProjectResult | RanksProjection:
    if isinstance(a, RankSet):
        if distribution is not None or win_rate is not None or median is not None:
            raise UserError(f"{a.source}: a directory of ranks takes speedup/files (distribution, win_rate "
                            f"and median project one trace at a time)")
        return project_ranks(a, speedup, files, on_ranks=on_ranks, strict=strict, problems=problems)
    if on_ranks:
        raise UserError(f"on_ranks: {a.source} is one trace, not a directory of ranks")
    if step_ms is not None:
        check_step_ms(a, step_ms)
    entries, warnings = collect_entries(speedup, [os.fspath(f) for f in files])
    dist = load_distribution(distribution) if isinstance(distribution, (str, os.PathLike)) else distribution
    return _project(a, entries, distribution=dist, win_rate=win_rate, median=median,
                    scenario_select=select, quantiles=quantiles, strict=strict, problems=load_problems(problems),
                    extra_warnings=warnings, step_ms=step_ms)


def predict(trace: TraceLike, part: str, speedup: float, launches: int | None = None,
            step_ms: float | None = None, problems: PathLike | None = None,
            call_us: float | None = None) -> Prediction:
    """What the base trace alone predicts when `part` (a selector) gets `speedup` times faster and
    launches `launches` kernels per call (costing `call_us` of CPU per call, unprofiled, when measured):
    Amdahl, replay, and the estimate with its interval."""
    return _predict(_analysis(trace), part, speedup, launches=launches, step_ms=step_ms,
                    problems=load_problems(problems), call_us=call_us)


def targets(trace: TraceLike, speedup: float = DEFAULT_SPEEDUP, by: Sequence[str] = ("op", "module"),
            top: int | None = 20, replay_top: int = 5, scope: str = "self", rules: PathLike | None = None,
            policy: PathLike | None = None, whole_trace: bool = False, window: str | None = None,
            lenient: bool = False, use_cache: bool = True, roofline: bool = False,
            peaks: str | None = None, rank_by: str = "gain") -> Targets:
    """Ops and nn.Modules (classes: `module`, instances: `module_path`; `scope` self or total) ranked by
    the end-to-end gain at `speedup`, as `headroom targets` (`top`: rows per grouping, None or 0 all;
    `replay_top`: the first N rows of each grouping also replayed, as --replay-top; `rules` .. `use_cache`:
    how a trace file is read, as `analyze`). `roofline`: also each row's FLOPs, bytes, achieved rates,
    limit, floor and max_speedup against the device's peaks (`peaks`: a data/devices.toml key, default the
    trace's GPU), as `--roofline`; `rank_by="achievable"`: ranked by the gain at min(max_speedup, speedup)."""
    a = trace if isinstance(trace, Analysis) else analyze(trace, rules, policy, whole_trace, window, lenient,
                                                          use_cache)
    if roofline:
        return roofline_targets(a, speedup, tuple(by), top, replay_top, scope, peaks, rank_by)
    return rank_targets(a, speedup, tuple(by), top, replay_top, scope)


def coverage(traces: Sequence[TraceLike], suite: str = "dlrm", problems: PathLike | None = None) -> Coverage:
    """Which problems of a benchmark suite (`dlrm`: DLRM-Bench, `kernelbench`: KernelBench level 1) the
    traces exercise, as `headroom coverage`: per problem the traces it matches, its events, time and
    share of each trace's GPU time (CPU op self time on a CPU trace), and the problems none matches.
    A directory stands for every trace in it."""
    analyses: list[Analysis] = []
    for t in traces:
        if not isinstance(t, Analysis) and os.path.isdir(t):
            analyses.extend(analyze_all(t))
        else:
            analyses.append(_analysis(t))
    return _coverage(analyses, suite=suite, problems=load_problems(problems))


def report_html(paths: Sequence[PathLike | Analysis | RankSet], out: PathLike, speedup: Sequence[str] = (),
                files: Sequence[PathLike] = (), target_speedup: float = DEFAULT_SPEEDUP, top: int = DEFAULT_TOP,
                problems: PathLike | None = None, rules: PathLike | None = None, policy: PathLike | None = None,
                whole_trace: bool = False, window: str | None = None, lenient: bool = False,
                use_cache: bool = True, roofline: bool = False, peaks: str | None = None) -> dict:
    """Write the `headroom report --html` page of traces, directories (a directory of the ranks of one run
    is one rank set) or analyses to `out`, and return its document (`report --html --json`): `traces`,
    `rank_sets`, `html`, `page` (`categories`, `targets` ranked at `target_speedup`, the first `top` per
    grouping (`roofline`: each trace's with the roofline columns, against `peaks` or its GPU), `projections`
    of `speedup`/`files` entries, `ranks`)."""
    check_html_output(out, [*(p for p in paths if isinstance(p, (str, os.PathLike))), rules, policy, problems, *files])
    entries, warnings = collect_entries(speedup, files)
    r, p = load_classifier(rules, policy)
    analyses, rank_sets = [], []
    for item in paths:
        if isinstance(item, Analysis):
            analyses.append(item)
        elif isinstance(item, RankSet):
            rank_sets.append(item)
        else:
            found = list(analyze_files(find_trace_files(item), rules=r, policy=p, whole_trace=whole_trace,
                                       window=window, lenient=lenient, use_cache=use_cache))
            order = rank_order(found) if os.path.isdir(item) else None
            if order is not None:
                rank_sets.append(rank_set(found, order, source=str(item)))
            else:
                analyses.extend(found)
    return html_report(analyses, rank_sets, out, entries, warnings, target_speedup=target_speedup, top=top,
                       problems=load_problems(problems), roofline=roofline, peaks=peaks)
def _run(trace: TraceLike | RankSet) -> Analysis | RankSet:
    if isinstance(trace, (Analysis, RankSet)):
        return trace
    return analyze_ranks(trace) if os.path.isdir(trace) else _analyze(trace)


def diff(before: TraceLike | RankSet, after: TraceLike | RankSet, by: str = "category") -> Diff:
    """Two runs of one workload compared, as `headroom diff`: `.step` (the unprofiled step where both
    manifests record it, else the profiled one) with its `speedup`, `.rows` (by category, op, module or
    kernel: before/after time per step, delta, share of the change, added/removed), `.waterfall()` (what
    the figure draws). A directory is the ranks of one run."""
    return _diff(_run(before), _run(after), by=by)


def diff_html(before: TraceLike | RankSet, after: TraceLike | RankSet, out: PathLike, by: str = "category") -> dict:
    """Write the `headroom diff --html` page of two runs to `out` and return its document (`diff --html
    --json`): the `diff` document (`step`, `profiled`, `unprofiled`, `rows`, ...) with `html` and `page`
    (`waterfall`: `Diff.waterfall()`'s bars in µs)."""
    check_html_output(out, [p for p in (before, after) if isinstance(p, (str, os.PathLike))])
    return html_diff(diff(before, after, by=by), out)


def analyze_ranks(path: PathLike, rules: PathLike | None = None, policy: PathLike | None = None,
                  whole_trace: bool = False, window: str | None = None) -> RankSet:
    """A directory holding the ranks of one run, analysed together (docs/distributed.md): `per_rank`,
    `categories`, `slowest_rank`, `step_us` (the synchronised step)."""
    return rank_set(analyze_all(path, rules, policy, whole_trace, window), source=str(path))


def project_ranks(ranks: RankSet | PathLike, speedup: Sequence[str] = (), files: Sequence[PathLike] = (),
                  on_ranks: Sequence[int] | None = None, strict: bool = False,
                  problems: PathLike | None = None) -> RanksProjection:
    """Speedups projected per rank, then through the collectives, as `headroom project DIR`."""
    rs = ranks if isinstance(ranks, RankSet) else analyze_ranks(ranks)
    entries, warnings = collect_entries(speedup, [os.fspath(f) for f in files])
    res = _project_ranks(rs, entries, on_ranks=on_ranks, problems=load_problems(problems), strict=strict)
    res.warnings = list(warnings) + res.warnings
    return res


__all__ = ["Analysis", "Diff", "ProjectResult", "RankSet", "RanksProjection", "Targets", "analyze", "analyze_all",
           "analyze_ranks", "coverage", "Coverage", "diff", "diff_html", "project", "project_ranks", "read_inputs",
           "report_html", "summary", "targets"]
