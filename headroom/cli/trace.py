"""`headroom classify`, `headroom annotate`, `headroom report`: reading traces."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from headroom.cli.common import (LenientOpt, NoCacheOpt, PolicyOpt, Reader, RulesOpt, TracesArg, WholeOpt,
                                 WindowOpt)
from headroom.cli.engine import AddressOpt, EngineOpt
from headroom.cli.output import emit_json


def classify(
    traces: List[Path] = TracesArg,
    as_json: bool = typer.Option(False, "--json", metavar="",
                                 help="One JSON document per trace, one per line (docs/cli.md)."),
    all_kernels: bool = typer.Option(False, "--all", metavar="",
                                     help="Also list every distinct kernel (with --json: a 'kernels' key)."),
    rules: Optional[Path] = RulesOpt,
    policy: Optional[Path] = PolicyOpt,
    whole_trace: bool = WholeOpt,
    window: Optional[str] = WindowOpt,
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
    per_rank: bool = typer.Option(False, "--per-rank", metavar="",
                                  help="A directory of ranks: also each rank's own table."),
    engine: str = EngineOpt,
    address: Optional[str] = AddressOpt,
) -> None:
    """Where did the GPU time go? Categories, busy/idle, and the addressable fraction.

    A directory holding the ranks of one run is analysed together: ranks side by side,
    communication overlapped and exposed, waits and the slowest rank (docs/distributed.md)."""
    from headroom.report.render import make_console, render_analysis, render_kernels
    from headroom.trace.analysis import Analysis

    reader = Reader(rules, policy, whole_trace, window, lenient, no_cache, engine=engine, address=address)
    console = make_console()
    for a in reader.inputs(traces):
        if not isinstance(a, Analysis):     # a RankSet: its modules imported only then (a single trace's start)
            from headroom.report.ranks import render_rank_set

            if as_json:
                emit_json("classify.ranks", a.to_dict(all_kernels=all_kernels))
                continue
            render_rank_set(a, console)
            console.print()
            for one in a.analyses if per_rank else []:
                render_analysis(one, console)
                console.print()
            continue
        if as_json:
            emit_json("classify", a.to_dict(all_kernels=all_kernels))
            continue
        render_analysis(a, console)
        if all_kernels:
            render_kernels(a, console)
        console.print()
    reader.finish()


def annotate(
    trace: Path = typer.Argument(..., metavar="TRACE", help="Trace to annotate."),
    out: Path = typer.Option(..., "-o", "--out", metavar="FILE", help="Output trace (.json or .json.gz)."),
    rules: Optional[Path] = RulesOpt,
    policy: Optional[Path] = PolicyOpt,
) -> None:
    """Write the trace back with each kernel's category in its args (for Perfetto)."""
    from headroom.files import check_output_file, check_output_not_input
    from headroom.report.annotate import annotate_trace

    check_output_not_input(out, [trace, rules, policy])
    check_output_file(out)
    n = annotate_trace(trace, out, rules=rules, policy=policy)
    print(f"annotated {n} GPU events -> {out}")


def report(
    paths: List[Path] = typer.Argument(None, metavar="[PATH]...",
                                       help="Traces or directories of traces (default: traces/)."),
    as_json: bool = typer.Option(False, "--json", metavar="", help="One JSON document (docs/cli.md)."),
    rules: Optional[Path] = RulesOpt,
    policy: Optional[Path] = PolicyOpt,
    whole_trace: bool = WholeOpt,
    window: Optional[str] = WindowOpt,
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
    engine: str = EngineOpt,
    address: Optional[str] = AddressOpt,
) -> None:
    """One row per trace: step time, idle share, addressable fraction, top addressable op.

    A directory of the ranks of one run: one row per rank, with its communication and waits."""
    from headroom.report.render import make_console, render_summary
    from headroom.report.tables import summary_frame, summary_records
    from headroom.trace.analysis import Analysis

    reader = Reader(rules, policy, whole_trace, window, lenient, no_cache, engine=engine, address=address,
                    product=report_row)
    inputs = list(reader.inputs(paths or [Path("traces")]))
    analyses = [a for a in inputs if isinstance(a, Analysis)]
    rank_sets = [rs for rs in inputs if not isinstance(rs, Analysis)]     # RankSets: their modules only then
    rank_tables = []
    if rank_sets:
        from headroom.report.ranks import rank_summary_frame, render_rank_summary

        rank_tables = [(rs, rank_summary_frame(rs)) for rs in rank_sets]
    df = summary_frame(analyses) if engine == "local" else summary_of_rows([reader.per_trace(a) for a in analyses])
    if as_json:
        emit_json("report", {"traces": summary_records(df),
                             "rank_sets": [{"source": rs.source, "kind": "ranks", "step_us": rs.step_us,
                                            "slowest_rank": rs.slowest_rank, "ranks": summary_records(t)}
                                           for rs, t in rank_tables],
                             "failed": reader.failed})
    else:
        console = make_console()
        if len(df):
            render_summary(df, console)
        for rs, t in rank_tables:
            render_rank_summary(rs, t, console)
    reader.finish()


def report_row(a):
    """A trace's row of the report (each trace's task computes it with --engine ray)."""
    from headroom.report.tables import summary_frame

    return summary_frame([a])


def summary_of_rows(rows: list):
    """The report's table from its rows (`report_row`): what `summary_frame` gives for all the traces."""
    import pandas as pd

    from headroom.report.tables import summary_frame

    return pd.concat(rows, ignore_index=True) if rows else summary_frame([])


def register(app: typer.Typer) -> None:
    app.command()(classify)
    app.command()(annotate)
    app.command()(report)
