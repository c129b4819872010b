"""`headroom classify`, `headroom annotate`, `headroom report`: reading traces."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from headroom.cli.common import PolicyOpt, Reader, RulesOpt, TracesArg, WholeOpt, WindowOpt
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
) -> None:
    """Where did the GPU time go? Categories, busy/idle, and the addressable fraction."""
    from headroom.report.render import make_console, render_analysis, render_kernels

    reader = Reader(rules, policy, whole_trace, window)
    console = make_console()
    for a in reader.analyses(traces):
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
    from headroom.files import check_output_file
    from headroom.report.annotate import annotate_trace

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
) -> None:
    """One row per trace: step time, idle share, addressable fraction, top addressable op."""
    from headroom.report.render import make_console, render_summary
    from headroom.report.tables import summary_frame, summary_records

    reader = Reader(rules, policy, whole_trace, window)
    analyses = list(reader.analyses(paths or [Path("traces")]))
    df = summary_frame(analyses)
    if as_json:
        emit_json("report", {"traces": summary_records(df), "failed": reader.failed})
    elif len(df):
        render_summary(df, make_console())
    reader.finish()


def register(app: typer.Typer) -> None:
    app.command()(classify)
    app.command()(annotate)
    app.command()(report)
