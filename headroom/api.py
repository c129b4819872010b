"""The Python API in one place: what `import headroom` offers notebooks and scripts.

    import headroom
    a = headroom.analyze("traces/dlrm.train.json.gz")
    a.to_frame()                                             # where the time went, per category
    r = headroom.project(a, speedup=["category:embedding=1.552"])
    r.to_frame()                                             # Amdahl and replay, per scenario
    headroom.targets(a).to_frame()                           # ops and modules ranked by end-to-end gain
    headroom.report_html(["traces/"], "report.html")         # the `headroom report --html` page
    headroom.coverage(["traces/"], suite="dlrm").to_frame()   # which DLRM-Bench problems the traces exercise

Each function takes a trace path or an `Analysis`; the CLI calls the same modules.
"""

from __future__ import annotations

import os
from typing import Sequence, Union

import pandas as pd

from headroom.projection.coverage import Coverage
from headroom.projection.coverage import coverage as _coverage
from headroom.projection.distributions import Distribution, load_distribution
from headroom.projection.problems import load_problems
from headroom.projection.project import Prediction, ProjectResult
from headroom.projection.project import predict as _predict
from headroom.projection.project import project as _project
from headroom.projection.ranks import RanksProjection
from headroom.projection.ranks import project_ranks as _project_ranks
from headroom.projection.scenarios import DEFAULT_QUANTILES
from headroom.projection.speedups import collect_entries
from headroom.projection.roofline import roofline_targets
from headroom.projection.targets import DEFAULT_SPEEDUP, Targets, rank_targets
from headroom.report.page import DEFAULT_TOP, check_html_output, html_report
from headroom.report.diff import Diff
from headroom.report.diff import diff as _diff
from headroom.report.tables import summary_frame
from headroom.trace.analysis import Analysis
from headroom.trace.analysis import analyze as _analyze
from headroom.trace.analysis import analyze_files
from headroom.trace.classify import load_classifier
from headroom.trace.load import find_trace_files
from headroom.trace.ranks import RankSet, rank_order, rank_set

TraceLike = Union[str, os.PathLike, Analysis]
PathLike = Union[str, os.PathLike]


def analyze(trace: PathLike, rules: PathLike | None = None, policy: PathLike | None = None,
            whole_trace: bool = False, window: str | None = None, lenient: bool = False,
            use_cache: bool = True) -> Analysis | list[Analysis]:
    """Classify where the time of one trace went (`rules`/`policy`: user TOML files, as --rules/--policy;
    `window`: steps by a range name, as --window; `lenient`, `use_cache`: as --lenient, --no-cache).
    A directory of per-rank traces gives one `Analysis` per rank, in file-name order (as `analyze_all`)."""
    if os.path.isdir(trace):
        return analyze_all(trace, rules=rules, policy=policy, whole_trace=whole_trace, window=window,
                           lenient=lenient, use_cache=use_cache)
    return _analyze(trace, rules=rules, policy=policy, whole_trace=whole_trace, window=window, lenient=lenient,
                    use_cache=use_cache)


def analyze_all(path: PathLike, rules: PathLike | None = None, policy: PathLike | None = None,
                whole_trace: bool = False, window: str | None = None, lenient: bool = False,
                use_cache: bool = True) -> list[Analysis]:
    """Every trace of a file or a directory (e.g. `traces/`, or one file per rank), rules read once."""
    r, p = load_classifier(rules, policy)
    return list(analyze_files(find_trace_files(path), rules=r, policy=p, whole_trace=whole_trace, window=window,
                              lenient=lenient, use_cache=use_cache))


def summary(analyses: Sequence[Analysis]) -> pd.DataFrame:
    """One row per trace: the `headroom report` table."""
    return summary_frame(list(analyses))


def _analysis(trace: TraceLike) -> Analysis:
    return trace if isinstance(trace, Analysis) else _analyze(trace)


def project(trace: TraceLike, speedup: Sequence[str] = (), files: Sequence[PathLike] = (),
            distribution: PathLike | Distribution | None = None, win_rate: float | None = None,
            median: float | None = None, select: str = "category:addressable",
            quantiles: Sequence[float] = DEFAULT_QUANTILES, strict: bool = False,
            problems: PathLike | None = None, step_ms: float | None = None) -> ProjectResult:
    """End-to-end projections (Amdahl and timeline replay, with the zero-time bound), as `headroom project`;
    `.estimate` is the first scenario's best estimate with its interval.

    `speedup`: ``SELECTOR=FACTOR[,launches=N]`` texts (``--speedup``); `files`: speedup files or `headroom
    verify` output (``--speedups``); `distribution`, `win_rate`/`median`, `select`: the distribution
    scenarios; `step_ms`: the unprofiled step time (``--step-ms``; default: the trace's manifest).
    """
    entries, warnings = collect_entries(speedup, files)
    dist = load_distribution(distribution) if isinstance(distribution, (str, os.PathLike)) else distribution
    return _project(_analysis(trace), entries, distribution=dist, win_rate=win_rate, median=median,
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
            top: int | None = 20, replay_top: int = 0, scope: str = "self", roofline: bool = False,
            peaks: str | None = None, rank_by: str = "gain") -> Targets:
    """Ops and nn.Modules (classes: `module`, instances: `module_path`; `scope` self or total) ranked by
    the end-to-end gain at `speedup`, as `headroom targets`. `roofline`: also each row's FLOPs, bytes,
    achieved rates, limit, floor and max_speedup against the device's peaks (`peaks`: a data/devices.toml
    key, default the trace's GPU), as `--roofline`; `rank_by="achievable"`: ranked by the gain at
    min(max_speedup, speedup)."""
    if roofline:
        return roofline_targets(_analysis(trace), speedup, tuple(by), top, replay_top, scope, peaks, rank_by)
    return rank_targets(_analysis(trace), speedup, tuple(by), top, replay_top, scope)


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
                use_cache: bool = True) -> dict:
    """Write the `headroom report --html` page of traces, directories (a directory of the ranks of one run
    is one rank set) or analyses to `out`, and return its document (`report --html --json`): `traces`,
    `rank_sets`, `html`, `page` (`categories`, `targets` ranked at `target_speedup`, the first `top` per
    grouping, `projections` of `speedup`/`files` entries, `ranks`)."""
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
                       problems=load_problems(problems))
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
    entries, warnings = collect_entries(speedup, files)
    res = _project_ranks(rs, entries, on_ranks=on_ranks, problems=load_problems(problems), strict=strict)
    res.warnings = list(warnings) + res.warnings
    return res


__all__ = ["Analysis", "Diff", "ProjectResult", "RankSet", "RanksProjection", "Targets", "analyze", "analyze_all",
           "analyze_ranks", "diff", "project", "project_ranks", "report_html", "summary", "targets"]
