"""`headroom project`, `headroom targets`, `headroom plot`: from kernel speedups to end-to-end answers."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from headroom.errors import UserError
from headroom.jsonio import dumps

RulesOpt = typer.Option(None, "--rules", help="TOML file of extra classification rules (tried first).")
PolicyOpt = typer.Option(None, "--policy", help="TOML file overriding which categories are addressable.")
WholeOpt = typer.Option(False, "--whole-trace", help="Use the whole trace, not only ProfilerStep ranges.")
LenientOpt = typer.Option(False, "--lenient", help=(
    "Drop GPU activities and steps with impossible times with a counted warning, instead of refusing the trace."))
NoCacheOpt = typer.Option(False, "--no-cache", help="Neither read nor write the trace's columnar cache.")
SpeedupOpt = typer.Option(None, "--speedup", "-s", help=(
    "SELECTOR=FACTOR, repeatable: category:embedding=1.552, op:aten::layer_norm=2, 'kernel:^triton_=1.2', "
    "problem:23_Softmax=1.3 (docs/projection.md). Command-line entries win overlaps with files."))
SpeedupsOpt = typer.Option(None, "--speedups", "-f", help=(
    "Speedup file (.toml/.json/.csv) or `headroom verify` JSON; repeatable."))
ProblemsOpt = typer.Option(None, "--problems", help="TOML file adding/replacing problem -> selector mappings.")


def _analyses(traces: List[Path], rules, policy, whole_trace: bool, lenient: bool = False, no_cache: bool = False):
    from headroom.cli.trace import print_warnings
    from headroom.trace.analysis import analyze_files
    from headroom.trace.classify import load_policy, load_rules
    from headroom.trace.load import find_trace_files

    r, p = load_rules(rules), load_policy(policy)
    files = [f for t in traces for f in find_trace_files(t)]
    out = []
    for a in analyze_files(files, rules=r, policy=p, whole_trace=whole_trace, lenient=lenient,
                           use_cache=not no_cache):
        print_warnings(a)
        out.append(a)
    return out


def project_cmd(
    traces: List[Path] = typer.Argument(..., help="Trace files (.json/.json.gz) or directories of per-rank traces."),
    speedup: Optional[List[str]] = SpeedupOpt,
    speedups: Optional[List[Path]] = SpeedupsOpt,
    distribution: Optional[Path] = typer.Option(None, "--distribution", help=(
        "A benchmark's results (verify suite JSON, speedup file, or a list of numbers): projections at "
        "win rate x median and at quantiles, applied to --select.")),
    win_rate: Optional[float] = typer.Option(None, "--win-rate", help="Fraction of problems won (with --median)."),
    median: Optional[float] = typer.Option(None, "--median", help="Median speedup of the winning problems."),
    scenario_select: str = typer.Option("category:addressable", "--select",
                                        help="Kernels the distribution scenarios apply to."),
    quantile: Optional[List[float]] = typer.Option(None, "--quantile", help="Quantiles for distributions (repeatable)."),
    strict: bool = typer.Option(False, "--strict", help="Treat warnings (no match, overlaps) as errors."),
    problems: Optional[Path] = ProblemsOpt,
    as_json: bool = typer.Option(False, "--json", help="One JSON object per trace, one per line (docs/projection.md)."),
    rules: Optional[Path] = RulesOpt,
    policy: Optional[Path] = PolicyOpt,
    whole_trace: bool = WholeOpt,
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
) -> None:
    """Project end-to-end step time from kernel speedups: Amdahl and timeline replay, with bounds."""
    from headroom.projection.distributions import load_distribution
    from headroom.projection.problems import load_problems
    from headroom.projection.project import project
    from headroom.projection.scenarios import DEFAULT_QUANTILES
    from headroom.projection.speedups import collect_entries
    from headroom.report.render import make_console, render_projection

    entries, warnings = collect_entries(speedup or [], speedups or [])
    dist = load_distribution(distribution) if distribution else None
    pm = load_problems(problems)
    quantiles = tuple(quantile) if quantile else DEFAULT_QUANTILES
    if strict and warnings:
        raise UserError(f"{warnings[0]} (strict mode)")
    console = make_console()
    for a in _analyses(traces, rules, policy, whole_trace, lenient, no_cache):
        res = project(a, entries, distribution=dist, win_rate=win_rate, median=median,
                      scenario_select=scenario_select, quantiles=quantiles, strict=strict, problems=pm,
                      extra_warnings=warnings)
        if as_json:
            print(dumps(res.to_dict()))
        else:
            render_projection(res, console)


def targets_cmd(
    trace: Path = typer.Argument(..., help="Trace file (.json/.json.gz)."),
    speedup: float = typer.Option(1.5, "--speedup", "-s", help="The speedup to rank by (default 1.5x)."),
    by: Optional[List[str]] = typer.Option(None, "--by", help="op, module, top_op or kernel (repeatable; default op and module)."),
    top: int = typer.Option(20, "--top", help="Rows per grouping."),
    replay_top: int = typer.Option(5, "--replay-top", help="Also replay the first N rows of each grouping (0: none)."),
    as_json: bool = typer.Option(False, "--json", help="JSON object (docs/projection.md)."),
    rules: Optional[Path] = RulesOpt,
    policy: Optional[Path] = PolicyOpt,
    whole_trace: bool = WholeOpt,
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
) -> None:
    """If one op got faster, which should it be? Ops and modules ranked by end-to-end gain."""
    from headroom.projection.targets import targets, targets_dict
    from headroom.report.render import make_console, render_targets

    for a in _analyses([trace], rules, policy, whole_trace, lenient, no_cache):
        table = targets(a, speedup=speedup, by=tuple(by) if by else ("op", "module"), top=top, replay_top=replay_top)
        if as_json:
            print(dumps(targets_dict(a, table, speedup)))
            continue
        render_targets(a, table, speedup, make_console())


FIGURES = ("addressable", "projection", "scaling")


def plot_cmd(
    traces: List[Path] = typer.Argument(..., help="Trace files or directories (one bar per trace)."),
    out: Path = typer.Option(Path("out/plots"), "--out", "-o", help="Output directory."),
    figure: Optional[List[str]] = typer.Option(None, "--figure", help="addressable, projection, scaling (default: all that apply)."),
    fmt: Optional[List[str]] = typer.Option(None, "--format", help="png, svg, pdf (repeatable; default all three)."),
    label: Optional[List[str]] = typer.Option(None, "--label", help="Bar label per trace, in order (repeatable)."),
    speedup: Optional[List[str]] = SpeedupOpt,
    speedups: Optional[List[Path]] = SpeedupsOpt,
    params: Optional[List[float]] = typer.Option(None, "--params", help="Parameter count per trace for the scaling chart."),
    family: Optional[str] = typer.Option(None, "--family", help="Family name for the scaling chart."),
    basis: str = typer.Option("kernel", "--basis", help="kernel: fractions of kernel time; wall: of the window, with idle."),
    problems: Optional[Path] = ProblemsOpt,
    rules: Optional[Path] = RulesOpt,
    policy: Optional[Path] = PolicyOpt,
    whole_trace: bool = WholeOpt,
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
) -> None:
    """Figures: addressable fraction per workload, projected step time, and scaling with model size."""
    from headroom.projection.problems import load_problems
    from headroom.projection.project import project
    from headroom.projection.speedups import collect_entries, parse_cli_speedup
    from headroom.report import plot
    from headroom.report.scaling import scaling_table
    from headroom.report.tables import addressable_summary, category_fractions, projection_table

    figures = list(figure) if figure else None
    for f in figures or []:
        if f not in FIGURES:
            raise UserError(f"--figure {f!r}: expected one of {', '.join(FIGURES)}")
    formats = tuple(fmt) if fmt else plot.FORMATS
    analyses = _analyses(traces, rules, policy, whole_trace, lenient, no_cache)
    if label and len(label) != len(analyses):
        raise UserError(f"--label given {len(label)} time(s) for {len(analyses)} trace(s)")
    if params and len(params) != len(analyses):
        raise UserError(f"--params given {len(params)} time(s) for {len(analyses)} trace(s)")
    labels = list(label) if label else None
    written = []
    want = figures or list(FIGURES)
    if "addressable" in want:
        fr = category_fractions(analyses, labels, basis)
        written += plot.save(plot.addressable_figure(fr, addressable_summary(analyses, labels, basis), basis=basis),
                             out / "addressable", formats)
    if "projection" in want:
        entries, warnings = collect_entries(speedup or [], speedups or [])
        title = "Projected step time"
        if not entries:
            entries = [parse_cli_speedup("category:addressable=1.5")]
            title += " (every addressable kernel 1.5x faster)"
        pm = load_problems(problems)
        results = [project(a, entries, problems=pm) for a in analyses]
        for r in results:
            for w in r.warnings:
                print(f"headroom: warning: {Path(r.source).name}: {w}")
        tbl = projection_table(results, [*(labels or [])] or [a.label for a in analyses])
        written += plot.save(plot.projection_figure(tbl, title), out / "projection", formats)
    if "scaling" in want:
        explicit = bool(figures and "scaling" in figures)
        st = scaling_table(analyses, params=params, labels=labels, family=family,
                           skip_missing=not explicit, min_sizes=2)
        if len(st) >= 2:
            written += plot.save(plot.scaling_figure(st), out / "scaling", formats)
        elif explicit:
            raise UserError("the scaling chart needs traces of one family at two or more sizes "
                            "(parameter counts from the manifests or --params)")
        else:
            print("headroom: note: no scaling chart (needs traces of one family at two or more sizes)")
    for p in written:
        print(p)


def register(app: typer.Typer) -> None:
    app.command("project")(project_cmd)
    app.command("targets")(targets_cmd)
    app.command("plot")(plot_cmd)
