"""The Python API in one place: what `import headroom` offers notebooks and scripts.

    import headroom
    a = headroom.analyze("traces/dlrm.train.json.gz")
    a.to_frame()                                             # where the time went, per category
    r = headroom.project(a, speedup=["category:embedding=1.552"])
    r.to_frame()                                             # Amdahl and replay, per scenario
    headroom.targets(a).to_frame()                           # ops and modules ranked by end-to-end gain

Each function takes a trace path or an `Analysis`; the CLI calls the same modules.
"""

from __future__ import annotations

import os
from typing import Sequence, Union

import pandas as pd

from headroom.projection.distributions import Distribution, load_distribution
from headroom.projection.problems import load_problems
from headroom.projection.project import ProjectResult
from headroom.projection.project import project as _project
from headroom.projection.scenarios import DEFAULT_QUANTILES
from headroom.projection.speedups import collect_entries
from headroom.projection.targets import DEFAULT_SPEEDUP, Targets, rank_targets
from headroom.report.tables import summary_frame
from headroom.trace.analysis import Analysis
from headroom.trace.analysis import analyze as _analyze
from headroom.trace.analysis import analyze_files
from headroom.trace.classify import load_policy, load_rules
from headroom.trace.load import find_trace_files

TraceLike = Union[str, os.PathLike, Analysis]
PathLike = Union[str, os.PathLike]


def analyze(trace: PathLike, rules: PathLike | None = None, policy: PathLike | None = None,
            whole_trace: bool = False) -> Analysis:
    """Classify where the time of one trace went (`rules`/`policy`: user TOML files, as --rules/--policy)."""
    return _analyze(trace, rules=rules, policy=policy, whole_trace=whole_trace)


def analyze_all(path: PathLike, rules: PathLike | None = None, policy: PathLike | None = None,
                whole_trace: bool = False) -> list[Analysis]:
    """Every trace of a file or a directory (e.g. `traces/`, or one file per rank), rules read once."""
    r, p = load_rules(rules), load_policy(policy)
    return list(analyze_files(find_trace_files(path), rules=r, policy=p, whole_trace=whole_trace))


def summary(analyses: Sequence[Analysis]) -> pd.DataFrame:
    """One row per trace: the `headroom report` table."""
    return summary_frame(list(analyses))


def _analysis(trace: TraceLike) -> Analysis:
    return trace if isinstance(trace, Analysis) else _analyze(trace)


def project(trace: TraceLike, speedup: Sequence[str] = (), files: Sequence[PathLike] = (),
            distribution: PathLike | Distribution | None = None, win_rate: float | None = None,
            median: float | None = None, select: str = "category:addressable",
            quantiles: Sequence[float] = DEFAULT_QUANTILES, strict: bool = False,
            problems: PathLike | None = None) -> ProjectResult:
    """End-to-end projections (Amdahl and timeline replay, with the zero-time bound), as `headroom project`.

    `speedup`: ``SELECTOR=FACTOR`` texts (``--speedup``); `files`: speedup files or `headroom verify`
    output (``--speedups``); `distribution`, `win_rate`/`median`, `select`: the distribution scenarios.
    """
    entries, warnings = collect_entries(speedup, files)
    dist = load_distribution(distribution) if isinstance(distribution, (str, os.PathLike)) else distribution
    return _project(_analysis(trace), entries, distribution=dist, win_rate=win_rate, median=median,
                    scenario_select=select, quantiles=quantiles, strict=strict, problems=load_problems(problems),
                    extra_warnings=warnings)


def targets(trace: TraceLike, speedup: float = DEFAULT_SPEEDUP, by: Sequence[str] = ("op", "module"),
            top: int | None = 20, replay_top: int = 0) -> Targets:
    """Ops and nn.Module class paths ranked by the end-to-end gain at `speedup`, as `headroom targets`."""
    return rank_targets(_analysis(trace), speedup, tuple(by), top, replay_top)


__all__ = ["Analysis", "ProjectResult", "Targets", "analyze", "analyze_all", "project", "summary", "targets"]
