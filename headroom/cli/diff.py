"""`headroom diff`: two runs of one workload compared (argument parsing; the numbers are headroom.report.diff)."""

from __future__ import annotations

import enum
from pathlib import Path

import typer

from headroom.cli.common import GraphSourceOpt, LenientOpt, NoCacheOpt, PolicyOpt, Reader, RulesOpt, WholeOpt, WindowOpt
from headroom.cli.output import EXIT_VERDICT, emit_json, warn
from headroom.errors import UserError
from headroom.jsonio import plain
from headroom.trace.read_options import ReadOptions

DiffBy = enum.Enum("DiffBy", {"category": "category", "op": "op", "module": "module", "kernel": "kernel"}, type=str)
_RunArg = "Trace file (.json/.json.gz), or a directory of the ranks of one run."


def _one_run(reader: Reader, path: Path):
    """The one Analysis (or RankSet) of `path`; a directory of unrelated traces is refused."""
    runs = list(reader.inputs([path]))
    reader.finish()
    if len(runs) != 1:
        raise UserError(f"{path}: {len(runs)} traces that are not the ranks of one run: diff takes one run per side")
    return runs[0]


ByOpt = typer.Option(
    "category",
    "--by",
    help=("Rows: category, op, module (nn.Module classes) or kernel (matched by name and launch site)."),
)
FailIfSlowerOpt = typer.Option(
    None,
    "--fail-if-slower",
    metavar="PCT",
    min=0.0,
    max=1e4,
    help=(
        "Exit 1 when AFTER's step is slower than BEFORE's by more than PCT percent (unprofiled where both "
        "manifests record it, else profiled)."
    ),
)
FigureOpt = typer.Option(
    None, "--figure", metavar="FILE", help=("Also draw the waterfall of the deltas into FILE (.png, .svg or .pdf).")
)
HtmlOpt = typer.Option(
    None,
    "--html",
    metavar="FILE",
    help=(
        "Also write one self-contained HTML page: the step on both clocks, the rows (sortable), the added and "
        "removed ones and the waterfall (stdout: its path; with --json, the document has the page's numbers)."
    ),
)


def diff_cmd(
    before: Path = typer.Argument(..., metavar="BEFORE", help=_RunArg),
    after: Path = typer.Argument(..., metavar="AFTER", help=_RunArg),
    by: DiffBy = ByOpt,
    as_json: bool = typer.Option(False, "--json", metavar="", help="One JSON document (docs/cli.md)."),
    fail_if_slower: float | None = FailIfSlowerOpt,
    top: int = typer.Option(25, "--top", min=0, help="Rows shown in the table (0: all; --json has them all)."),
    figure: Path | None = FigureOpt,
    html: Path | None = HtmlOpt,
    rules: Path | None = RulesOpt,
    policy: Path | None = PolicyOpt,
    whole_trace: bool = WholeOpt,
    window: str | None = WindowOpt,
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
    graph_source: Path | None = GraphSourceOpt,
) -> None:
    """What changed between two runs: the step time, and which categories, ops, modules or kernels moved.

    Exit 1 with --fail-if-slower when AFTER is slower by more than the threshold (for CI)."""
    from headroom.report.diff import diff  # what headroom.diff calls, without the facade's imports
    from headroom.report.render import make_console
    from headroom.report.render_diff import render_diff

    if figure is not None:
        from headroom.files import check_output_file, check_output_not_input
        from headroom.report.figure_files import FORMATS

        if figure.suffix.lstrip(".") not in FORMATS:
            raise UserError(f"--figure {figure}: the name must end in .png, .svg or .pdf")
        check_output_not_input(figure, [before, after, rules, policy], option="--figure")
        check_output_file(figure)
    if html is not None:
        from headroom.report.page import check_html_output

        check_html_output(html, [before, after, rules, policy])
        if figure is not None and html.resolve() == figure.resolve():
            raise UserError(f"--html {html}: also the --figure file (choose another)")
    reader = Reader(ReadOptions.from_flags(rules, policy, whole_trace, window, lenient, no_cache, graph_source))
    d = diff(_one_run(reader, before), _one_run(reader, after), by=by.value)
    for note in d.notes:
        warn(note)
    slower = fail_if_slower is not None and d.slower_than(fail_if_slower)
    if figure is not None:
        from headroom.report.figure_files import save

        save(d.figure(), figure, formats=(figure.suffix.lstrip("."),))
    gate = None if fail_if_slower is None else {"fail_if_slower_pct": fail_if_slower, "slower": slower}
    if html is not None:
        from headroom.report.diff_html import html_diff

        doc = html_diff(d, html, gate)
        if as_json:
            emit_json("diff", doc)
        else:
            print(html)
    elif as_json:
        emit_json("diff", {**plain(d), "gate": gate})
    else:
        render_diff(d, make_console(), top=top or None)
    if slower:
        warn(
            f"{d.after}: the {d.step.clock} step is {100 * d.step.change:+.2f}% against {d.before}, "
            f"over --fail-if-slower {fail_if_slower:g}%"
        )
        raise typer.Exit(code=EXIT_VERDICT)


def register(app: typer.Typer) -> None:
    app.command("diff")(diff_cmd)
