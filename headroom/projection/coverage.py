"""Suite coverage: which benchmark problems of a suite stand for time in the given traces, and where.

A problem matches a trace when its selectors (headroom/data/problems.toml) pick at least one event
of it. Its share is the picked events' time over the trace's total: GPU time, or CPU operator self
time for a trace recorded without a GPU (`Analysis.mode`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.jsonio import encoded
from headroom.projection.matching import _Matcher
from headroom.projection.problems import MappedProblem, ProblemMap, load_problems
from headroom.trace.analysis import Analysis

# `--suite` names -> the `suite` of problems.toml.
SUITES = {"dlrm": "DLRM-Bench", "kernelbench": "KernelBench/level1"}
TOP = 3


@dataclass(frozen=True)
class TraceMatch:
    """What one problem picks in one trace."""

    trace: str
    mode: str  # gpu | cpu-ops: what the share is a share of
    events: int
    us: float
    share: float  # of the trace's total time
    # the picked kernels (CPU ops on a CPU trace) with the most time
    top: list[tuple[str, float]] = field(metadata=encoded(lambda top: [{"name": n, "us": u} for n, u in top]))
    ops: list[str]  # the launching ops of the picked events, most time first


@dataclass(frozen=True)
class ProblemCoverage:
    name: str
    matches: list[TraceMatch] = field(default_factory=list)

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("name", "matched", "matches")

    @property
    def matched(self) -> bool:
        return bool(self.matches)


@dataclass(frozen=True)
class Coverage:
    suite: str
    traces: list[str]
    problems: list[ProblemCoverage]

    # `headroom coverage --json` (docs/cli.md): counts where the properties are lists of names.
    JSON_KEYS: ClassVar[tuple[str | tuple[str, str], ...]] = (
        "suite",
        "traces",
        ("matched", "matched_count"),
        "problems_total",
        "unmatched",
        "problems",
    )

    @property
    def matched_count(self) -> int:
        return len(self.matched)

    @property
    def problems_total(self) -> int:
        return len(self.problems)

    @property
    def unmatched(self) -> list[str]:
        return [p.name for p in self.problems if not p.matched]

    @property
    def matched(self) -> list[str]:
        return [p.name for p in self.problems if p.matched]

    def to_frame(self) -> pd.DataFrame:
        """One row per (problem, trace) match, and one row with no trace per unmatched problem."""
        rows = []
        for p in self.problems:
            for m in p.matches:
                rows.append(
                    {
                        "problem": p.name,
                        "trace": m.trace,
                        "share": m.share,
                        "us": m.us,
                        "events": m.events,
                        "top": ", ".join(n for n, _ in m.top),
                    }
                )
            if not p.matches:
                rows.append({"problem": p.name, "trace": None, "share": 0.0, "us": 0.0, "events": 0, "top": ""})
        return pd.DataFrame(rows, columns=["problem", "trace", "share", "us", "events", "top"])


def suite_problems(suite: str, problems: ProblemMap | None = None) -> list[MappedProblem]:
    """The problems of a suite, by its `--suite` name (dlrm, kernelbench) or its full name."""
    problems = problems or load_problems()
    by_suite = problems.suites()
    name = SUITES.get(suite.lower(), suite)
    if name not in by_suite:
        known = sorted(set(SUITES) | set(by_suite))
        raise UserError(f"--suite {suite}: unknown suite (one of {', '.join(known)})")
    return [problems.problems[n] for n in by_suite[name]]


class _Columns:
    """The columns of one trace's events that a match reports, read once for all the problems."""

    def __init__(self, a: Analysis) -> None:
        ev = a.events
        self.dur = ev["dur"].to_numpy(dtype=float)
        self.names = ev["name"].astype(str).to_numpy(dtype=object)
        self.ops = (
            ev["op"].astype(object).where(ev["op"].notna(), "").astype(str).to_numpy(dtype=object)
            if "op" in ev.columns
            else np.full(len(ev), "", dtype=object)
        )


def _top(dur: np.ndarray, labels: np.ndarray, n: int) -> pd.Series:
    return pd.Series(dur).groupby(labels).sum().sort_values(ascending=False).head(n)


def _match(a: Analysis, cols: _Columns, matcher: _Matcher, p: MappedProblem) -> TraceMatch | None:
    mask = np.zeros(matcher.n, dtype=bool)
    for sel in p.selectors:
        mask |= matcher.selector(sel)
    if not mask.any():
        return None
    dur = cols.dur[mask]
    us = float(dur.sum())
    top = _top(dur, cols.names[mask], TOP)
    ops = [str(k) for k in _top(dur, cols.ops[mask], TOP + 1).index if k][:TOP]
    total = a.total_us
    return TraceMatch(
        trace=str(a.source),
        mode=a.mode,
        events=int(mask.sum()),
        us=us,
        share=us / total if total > 0 else 0.0,
        top=[(str(k), float(v)) for k, v in top.items()],
        ops=ops,
    )


def coverage(analyses: Sequence[Analysis], suite: str = "dlrm", problems: ProblemMap | None = None) -> Coverage:
    """Per problem of `suite`, the traces it matches (events, time, share, top kernels)."""
    problems = problems or load_problems()
    wanted = suite_problems(suite, problems)
    per: dict[str, list[TraceMatch]] = {p.name: [] for p in wanted}
    for a in analyses:
        matcher, cols = _Matcher(a.events, problems), _Columns(a)
        for p in wanted:
            m = _match(a, cols, matcher, p)
            if m is not None:
                per[p.name].append(m)
    return Coverage(
        suite=SUITES.get(suite.lower(), suite),
        traces=[str(a.source) for a in analyses],
        problems=[ProblemCoverage(n, ms) for n, ms in per.items()],
    )
