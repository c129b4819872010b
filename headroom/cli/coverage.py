"""`headroom coverage`: which problems of a benchmark suite the given traces exercise (argument parsing;
the numbers are headroom.projection.coverage)."""

from __future__ import annotations

from pathlib import Path

import typer

from headroom.cli.common import (
    GraphSourceOpt,
    LenientOpt,
    NoCacheOpt,
    PolicyOpt,
    ProblemsOpt,
    Reader,
    RulesOpt,
    TracesArg,
    WholeOpt,
    WindowOpt,
)
from headroom.cli.output import EXIT_VERDICT, emit_json, warn
from headroom.jsonio import plain
from headroom.trace.read_options import ReadOptions


def coverage_cmd(
    traces: list[Path] = TracesArg,
    suite: str = typer.Option(
        "dlrm",
        "--suite",
        metavar="SUITE",
        help=("dlrm (DLRM-Bench) or kernelbench (KernelBench level 1), or a suite name of the problem map."),
    ),
    as_json: bool = typer.Option(False, "--json", metavar="", help="One JSON document (docs/cli.md)."),
    strict: bool = typer.Option(
        False, "--strict", metavar="", help=("Exit 1 when a problem of the suite matches no trace (for CI).")
    ),
    problems: Path | None = ProblemsOpt,
    rules: Path | None = RulesOpt,
    policy: Path | None = PolicyOpt,
    whole_trace: bool = WholeOpt,
    window: str | None = WindowOpt,
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
    graph_source: Path | None = GraphSourceOpt,
) -> None:
    """Per problem of a suite: the traces it matches, its kernels and share of GPU time (CPU op time on a
    CPU trace), and the problems no trace exercises.

    Exit 1 with --strict when any problem is unmatched."""
    # what headroom.coverage calls, without the facade's imports
    from headroom.projection.coverage import coverage, suite_problems
    from headroom.projection.problems import load_problems

    problem_map = load_problems(problems)
    suite_problems(suite, problem_map)  # an unknown suite is bad input before any trace is read
    reader = Reader(ReadOptions.from_flags(rules, policy, whole_trace, window, lenient, no_cache, graph_source))
    analyses = list(reader.analyses(traces))
    reader.finish()
    c = coverage(analyses, suite=suite, problems=problem_map)
    if as_json:
        emit_json("coverage", plain(c))
    else:
        from headroom.report.render import make_console
        from headroom.report.render_coverage import render_coverage

        render_coverage(c, make_console())
    if strict and c.unmatched:
        warn(f"{len(c.unmatched)} of {len(c.problems)} {c.suite} problems match no trace: {', '.join(c.unmatched)}")
        raise typer.Exit(code=EXIT_VERDICT)


def register(app: typer.Typer) -> None:
    app.command("coverage")(coverage_cmd)
