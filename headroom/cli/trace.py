"""`headroom classify`, `headroom annotate`, `headroom report`: reading traces."""

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
    SpeedupOpt,
    SpeedupsOpt,
    TracesArg,
    WholeOpt,
    WindowOpt,
)
from headroom.cli.engine import AddressOpt, EngineOpt
from headroom.cli.output import emit_json, warn
from headroom.errors import UserError
from headroom.trace.read_options import ReadOptions


def classify(
    traces: list[Path] = TracesArg,
    as_json: bool = typer.Option(
        False, "--json", metavar="", help="One JSON document per trace, one per line (docs/cli.md)."
    ),
    all_kernels: bool = typer.Option(
        False, "--all", metavar="", help="Also list every distinct kernel (with --json: a 'kernels' key)."
    ),
    rules: Path | None = RulesOpt,
    policy: Path | None = PolicyOpt,
    whole_trace: bool = WholeOpt,
    window: str | None = WindowOpt,
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
    graph_source: Path | None = GraphSourceOpt,
    per_rank: bool = typer.Option(
        False, "--per-rank", metavar="", help="A directory of ranks: also each rank's own table."
    ),
    engine: str = EngineOpt,
    address: str | None = AddressOpt,
) -> None:
    """Where did the GPU time go? Categories, busy/idle, and the addressable fraction.

    A directory holding the ranks of one run is analysed together: ranks side by side,
    communication overlapped and exposed, waits and the slowest rank (docs/distributed.md)."""
    from headroom.report.render import make_console, render_analysis, render_kernels
    from headroom.report.summary import Summary, classify_body

    read = ReadOptions.from_flags(rules, policy, whole_trace, window, lenient, no_cache, graph_source)
    reader = Reader(read, engine=engine, address=address, summaries=True)
    console = make_console()
    for a in reader.inputs(traces):
        if not isinstance(a, Summary):  # a RankSet: its modules imported only then (a single trace's start)
            from headroom.report.rank_tables import render_rank_set
            from headroom.report.summary import of

            if as_json:
                emit_json("classify.ranks", a.to_dict(all_kernels=all_kernels))
                continue
            render_rank_set(a, console)
            console.print()
            for one in a.analyses if per_rank else []:
                render_analysis(of(one).document, console)
                console.print()
            continue
        if as_json:
            emit_json("classify", classify_body(a, all_kernels))
            continue
        render_analysis(a.document, console)
        if all_kernels:
            render_kernels(a.document, console)
        console.print()
    reader.finish()


def annotate(
    trace: Path = typer.Argument(..., metavar="TRACE", help="Trace to annotate."),
    out: Path = typer.Option(..., "-o", "--out", metavar="FILE", help="Output trace (.json or .json.gz)."),
    rules: Path | None = RulesOpt,
    policy: Path | None = PolicyOpt,
) -> None:
    """Write the trace back with each kernel's category in its args (for Perfetto)."""
    from headroom.files import check_output_file, check_output_not_input
    from headroom.report.annotate import annotate_trace

    check_output_not_input(out, [trace, rules, policy])
    check_output_file(out)
    n = annotate_trace(trace, out, rules=rules, policy=policy)
    print(f"annotated {n} GPU events -> {out}")


PathsArg = typer.Argument(None, metavar="[PATH]...", help="Traces or directories of traces (default: traces/).")
HtmlOpt = typer.Option(
    None,
    "--html",
    metavar="FILE",
    help=(
        "Also write one self-contained HTML page: the summary, category shares, top targets, the projection "
        "of --speedup/--speedups and per-rank views (with --json, the document has the page's numbers)."
    ),
)
TargetSpeedupOpt = typer.Option(
    1.5,
    "--target-speedup",
    min=1e-9,
    metavar="FACTOR",
    help="With --html: the speedup the targets are ranked by (default 1.5x).",
)
RooflineOpt = typer.Option(
    False,
    "--roofline",
    metavar="",
    help=(
        "With --html: each trace's targets also get their roofline bound (max speedup, limit, fractions of the "
        "peaks, achievable gain), as `targets --roofline`."
    ),
)
PeaksOpt = typer.Option(
    None,
    "--peaks",
    metavar="DEVICE",
    help=("With --roofline: the device whose peaks to use (h200, h100, a100, cpu; default each trace's GPU)."),
)


def report(
    paths: list[Path] = PathsArg,
    as_json: bool = typer.Option(False, "--json", metavar="", help="One JSON document (docs/cli.md)."),
    html: Path | None = HtmlOpt,
    speedup: list[str] | None = SpeedupOpt,
    speedups: list[Path] | None = SpeedupsOpt,
    target_speedup: float = TargetSpeedupOpt,
    top: int = typer.Option(10, "--top", min=0, help="With --html: target rows per grouping (0: all)."),
    roofline: bool = RooflineOpt,
    peaks: str | None = PeaksOpt,
    problems: Path | None = ProblemsOpt,
    rules: Path | None = RulesOpt,
    policy: Path | None = PolicyOpt,
    whole_trace: bool = WholeOpt,
    window: str | None = WindowOpt,
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
    graph_source: Path | None = GraphSourceOpt,
    engine: str = EngineOpt,
    address: str | None = AddressOpt,
) -> None:
    """One row per trace: step time, idle share, addressable fraction, top addressable op.

    A directory of the ranks of one run: one row per rank, with its communication and waits.
    --html FILE: also a page with figures, targets and projections (docs/cli.md)."""
    paths = paths or [Path("traces")]
    _check_page_flags(
        html, bool(speedup or speedups or problems), roofline, peaks, engine != "local" or address is not None
    )
    read = ReadOptions.from_flags(rules, policy, whole_trace, window, lenient, no_cache, graph_source)
    if html is not None:
        _report_page(paths, html, as_json, speedup, speedups, target_speedup, top, roofline, peaks, problems, read)
        return
    from headroom.report.summary import Summary, report_rows

    reader = Reader(read, engine=engine, address=address, product=report_summary, summaries=True)
    inputs = list(reader.inputs(paths))
    summaries = [s for s in inputs if isinstance(s, Summary)]
    rank_sets = [rs for rs in inputs if not isinstance(rs, Summary)]  # RankSets: their modules only then
    _print_report(report_rows(summaries), rank_sets, reader.failed, as_json)
    reader.finish()


def _report_page(
    paths: list[Path],
    html: Path,
    as_json: bool,
    speedup: list[str] | None,
    speedups: list[Path] | None,
    target_speedup: float,
    top: int,
    roofline: bool,
    peaks: str | None,
    problems: Path | None,
    read: ReadOptions,
) -> None:
    """`report --html FILE`: the page (with --json, its numbers), from the traces' analyses."""
    from headroom.projection.problems import load_problems
    from headroom.projection.speedups import collect_entries
    from headroom.report.page import html_report
    from headroom.trace.analysis import Analysis

    _check_page_inputs(html, [*paths, read.rules, read.policy, problems, *(speedups or [])], target_speedup, peaks)
    entries, entry_warnings = collect_entries(speedup or [], speedups or [])
    pm = load_problems(problems)
    reader = Reader(read)
    inputs = list(reader.inputs(paths))
    analyses = [a for a in inputs if isinstance(a, Analysis)]
    rank_sets = [rs for rs in inputs if not isinstance(rs, Analysis)]
    doc = html_report(
        analyses, rank_sets, html, entries, entry_warnings, reader.failed, target_speedup, top, pm, roofline, peaks
    )
    for p in doc["page"]["projections"]:
        for w in p["warnings"]:
            warn(f"{p.get('trace') or p.get('source')}: {w}")
    if as_json:
        emit_json("report", doc)
    else:
        print(html)
    reader.finish()


def _print_report(rows: list[dict], rank_sets: list, failed: list[str], as_json: bool) -> None:
    """The report's table (`rows`, one per trace: summary.report_rows) and each directory of ranks' table, or
    its JSON document."""
    if as_json:
        from headroom.report.summary import report_document

        records = []
        if rank_sets:  # (their module imports pandas: a report of single traces does without)
            from headroom.report.rank_tables import rank_set_record

            records = [rank_set_record(rs) for rs in rank_sets]
        emit_json("report", report_document(rows, records, failed))
        return
    from headroom.report.render import make_console, render_summary

    console = make_console()
    if rows:
        render_summary(rows, console)
    if rank_sets:
        from headroom.report.rank_tables import rank_summary_frame, render_rank_summary

        for rs in rank_sets:
            render_rank_summary(rs, rank_summary_frame(rs), console)


def _check_page_flags(html: Path | None, projects: bool, roofline: bool, peaks: str | None, fleet: bool) -> None:
    """The flags that go with --html (the page's projection and targets) refused without it, and --html refused
    with an engine (`fleet`: --engine or --address given)."""
    if html is None and projects:
        raise UserError(
            "--speedup, --speedups and --problems go with --html (the page's projection); "
            "headroom project projects on its own"
        )
    if html is None and roofline:
        raise UserError(
            "--roofline goes with --html (the page's targets); headroom targets --roofline ranks on its own"
        )
    if peaks is not None and not roofline:
        raise UserError("--peaks goes with --roofline")
    if html is not None and fleet:
        raise UserError("--html reads its traces in this process: leave out --engine/--address")


def _check_page_inputs(html: Path, inputs: list, target_speedup: float, peaks: str | None) -> None:
    """The page's output path (not one of its `inputs`), --target-speedup and --peaks, before any trace is read."""
    from headroom.projection.speedups import parse_factor
    from headroom.report.page import check_html_output

    check_html_output(html, inputs)
    parse_factor(target_speedup, "--target-speedup")
    if peaks is not None:
        from headroom.projection.roofline import device_for

        device_for("", peaks)  # an unknown name is refused


def report_summary(a):
    """A trace's summary, whose row `report` prints (each trace's task makes it with --engine ray)."""
    from headroom.report.summary import of

    return of(a)


def register(app: typer.Typer) -> None:
    app.command()(classify)
    app.command()(annotate)
    app.command()(report)
