"""From kernel speedups to end-to-end answers: project, predict, targets, and the ranks of one run."""

from __future__ import annotations

import os
from collections.abc import Sequence

from headroom.api.traces import DEFAULT_READ, PathLike, TraceLike, analyze, analyze_ranks, as_analysis, read_inputs
from headroom.errors import UserError
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
from headroom.trace.analysis import Analysis
from headroom.trace.rank_set import RankSet
from headroom.trace.read_options import ReadOptions


def project(
    trace: TraceLike | RankSet,
    speedup: Sequence[str] = (),
    files: Sequence[PathLike] = (),
    distribution: PathLike | Distribution | None = None,
    win_rate: float | None = None,
    median: float | None = None,
    select: str = "category:addressable",
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    strict: bool = False,
    problems: PathLike | None = None,
    step_ms: float | None = None,
    on_ranks: Sequence[int] | None = None,
    read: ReadOptions = DEFAULT_READ,
) -> ProjectResult | RanksProjection | list[ProjectResult | RanksProjection]:
    """End-to-end projections (Amdahl and timeline replay, with the zero-time bound), as `headroom project`;
    `.estimate` is the first scenario's best estimate with its interval.

    What it returns follows what it is given, as the command's output does: a trace file or an `Analysis`
    gives one `ProjectResult`; a `RankSet` one `RanksProjection` (through the collectives, as
    `project_ranks`); a directory a list, one result per trace in it, or one `RanksProjection` when it
    holds the ranks of one run (one per JSON document `headroom project DIR --json` prints).

    `speedup`: ``SELECTOR=FACTOR[,launches=N]`` texts (``--speedup``); `files`: speedup files or `headroom
    verify` output (``--speedups``); `distribution`, `win_rate`/`median`, `select`: the distribution
    scenarios; `step_ms`: the unprofiled step time (``--step-ms``; default: the trace's manifest);
    `on_ranks`: for ranks, the ranks the speedups apply on (``--on-rank``); `read`: how a path is read.
    """
    if isinstance(trace, (Analysis, RankSet)):
        inputs: list[Analysis | RankSet] = [trace]
    elif os.path.isdir(trace):
        inputs = read_inputs(trace, read)
    else:
        inputs = [analyze(trace, read)]
    results = [
        _project_one(
            a, speedup, files, distribution, win_rate, median, select, quantiles, strict, problems, step_ms, on_ranks
        )
        for a in inputs
    ]
    return results if not isinstance(trace, (Analysis, RankSet)) and os.path.isdir(trace) else results[0]


def _project_one(
    a: Analysis | RankSet,
    speedup: Sequence[str],
    files: Sequence[PathLike],
    distribution: PathLike | Distribution | None,
    win_rate: float | None,
    median: float | None,
    select: str,
    quantiles: Sequence[float],
    strict: bool,
    problems: PathLike | None,
    step_ms: float | None,
    on_ranks: Sequence[int] | None,
) -> ProjectResult | RanksProjection:
    if isinstance(a, RankSet):
        if distribution is not None or win_rate is not None or median is not None:
            raise UserError(
                f"{a.source}: a directory of ranks takes speedup/files (distribution, win_rate "
                f"and median project one trace at a time)"
            )
        return project_ranks(a, speedup, files, on_ranks=on_ranks, strict=strict, problems=problems)
    if on_ranks:
        raise UserError(f"on_ranks: {a.source} is one trace, not a directory of ranks")
    if step_ms is not None:
        check_step_ms(a, step_ms)
    entries, warnings = collect_entries(speedup, [os.fspath(f) for f in files])
    dist = load_distribution(distribution) if isinstance(distribution, (str, os.PathLike)) else distribution
    return _project(
        a,
        entries,
        distribution=dist,
        win_rate=win_rate,
        median=median,
        scenario_select=select,
        quantiles=quantiles,
        strict=strict,
        problems=load_problems(problems),
        extra_warnings=warnings,
        step_ms=step_ms,
    )


def predict(
    trace: TraceLike,
    part: str,
    speedup: float,
    launches: int | None = None,
    step_ms: float | None = None,
    problems: PathLike | None = None,
    call_us: float | None = None,
    read: ReadOptions = DEFAULT_READ,
) -> Prediction:
    """What the base trace alone predicts when `part` (a selector) gets `speedup` times faster and
    launches `launches` kernels per call (costing `call_us` of CPU per call, unprofiled, when measured):
    a `Prediction` with Amdahl, replay, and the estimate with its interval."""
    return _predict(
        as_analysis(trace, read),
        part,
        speedup,
        launches=launches,
        step_ms=step_ms,
        problems=load_problems(problems),
        call_us=call_us,
    )


def targets(
    trace: TraceLike,
    speedup: float = DEFAULT_SPEEDUP,
    by: Sequence[str] = ("op", "module"),
    top: int | None = 20,
    replay_top: int = 5,
    scope: str = "self",
    roofline: bool = False,
    peaks: str | None = None,
    rank_by: str = "gain",
    read: ReadOptions = DEFAULT_READ,
) -> Targets:
    """Ops and nn.Modules ranked by the end-to-end gain at `speedup`, as `headroom targets`; returns a `Targets`
    (`.to_frame()`: one row per op or module).

    `by`: the groupings (op; module: classes, module_path: instances; `scope` self or total); `top`: rows per
    grouping (None or 0: all); `replay_top`: the first N rows of each grouping also replayed (--replay-top).
    `roofline`: also each row's FLOPs, bytes, achieved rates, limit, floor and max_speedup against the
    device's peaks (`peaks`: a data/devices.toml key, default the trace's GPU), as `--roofline`;
    `rank_by="achievable"`: ranked by the gain at min(max_speedup, speedup). `read`: how a path is read."""
    a = as_analysis(trace, read)
    if roofline:
        return roofline_targets(a, speedup, tuple(by), top, replay_top, scope, peaks, rank_by)
    return rank_targets(a, speedup, tuple(by), top, replay_top, scope)


def project_ranks(
    ranks: RankSet | PathLike,
    speedup: Sequence[str] = (),
    files: Sequence[PathLike] = (),
    on_ranks: Sequence[int] | None = None,
    strict: bool = False,
    problems: PathLike | None = None,
    read: ReadOptions = DEFAULT_READ,
) -> RanksProjection:
    """Speedups projected per rank, then through the collectives, as `headroom project DIR`: a
    `RanksProjection` (`on_ranks`: the ranks the speedups apply on, default all)."""
    rs = ranks if isinstance(ranks, RankSet) else analyze_ranks(ranks, read)
    entries, warnings = collect_entries(speedup, [os.fspath(f) for f in files])
    res = _project_ranks(rs, entries, on_ranks=on_ranks, problems=load_problems(problems), strict=strict)
    res.warnings = list(warnings) + res.warnings
    return res
