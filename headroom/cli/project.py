"""`headroom project`, `headroom targets`, `headroom plot`: from kernel speedups to end-to-end answers."""

from __future__ import annotations

import enum
from functools import partial
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
    read_all,
)
from headroom.cli.engine import AddressOpt, EngineOpt
from headroom.cli.output import emit_json, warn
from headroom.errors import UserError
from headroom.jsonio import plain
from headroom.trace.read_options import ReadOptions

DistributionOpt = typer.Option(
    None,
    "--distribution",
    metavar="FILE",
    help=(
        "A benchmark's results (verify suite JSON, speedup file, or a list of numbers): projections at "
        "win rate x median and at quantiles, applied to --select."
    ),
)
WinRateOpt = typer.Option(None, "--win-rate", min=0.0, max=1.0, help="Fraction of problems won (with --median).")
ScenarioSelectOpt = typer.Option(
    "category:addressable", "--select", metavar="SELECTOR", help="Kernels the distribution scenarios apply to."
)
QuantileOpt = typer.Option(
    None, "--quantile", metavar="Q", min=0.0, max=1.0, help="Quantiles for distributions (repeatable)."
)
StepMsOpt = typer.Option(
    None,
    "--step-ms",
    metavar="MS",
    help=(
        "The step time without the profiler, in ms (default: the trace's manifest, when headroom profile "
        "wrote it): the replay's CPU clock is scaled to reproduce it."
    ),
)
AsJsonOpt = typer.Option(False, "--json", metavar="", help="One JSON document per trace, one per line (docs/cli.md).")
OnRankOpt = typer.Option(
    None,
    "--on-rank",
    metavar="RANK",
    help=("A directory of ranks: apply the speedups on this rank only (repeatable; default every rank)."),
)


def project_cmd(
    traces: list[Path] = TracesArg,
    speedup: list[str] | None = SpeedupOpt,
    speedups: list[Path] | None = SpeedupsOpt,
    distribution: Path | None = DistributionOpt,
    win_rate: float | None = WinRateOpt,
    median: float | None = typer.Option(None, "--median", min=1e-9, help="Median speedup of the winning problems."),
    scenario_select: str = ScenarioSelectOpt,
    quantile: list[float] | None = QuantileOpt,
    strict: bool = typer.Option(False, "--strict", metavar="", help="Treat warnings (no match, overlaps) as errors."),
    step_ms: float | None = StepMsOpt,
    problems: Path | None = ProblemsOpt,
    as_json: bool = AsJsonOpt,
    rules: Path | None = RulesOpt,
    policy: Path | None = PolicyOpt,
    whole_trace: bool = WholeOpt,
    window: str | None = WindowOpt,
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
    graph_source: Path | None = GraphSourceOpt,
    on_rank: list[int] | None = OnRankOpt,
    engine: str = EngineOpt,
    address: str | None = AddressOpt,
) -> None:
    """Project end-to-end step time from kernel speedups: Amdahl and timeline replay, with bounds.

    A directory of the ranks of one run projects per rank, then through the collectives: the
    step ends when the slowest rank reaches each one (docs/distributed.md)."""
    from headroom.projection.distributions import load_distribution
    from headroom.projection.overhead import unprofiled_step_us
    from headroom.projection.problems import load_problems
    from headroom.projection.scenarios import DEFAULT_QUANTILES
    from headroom.projection.speedups import collect_entries
    from headroom.report.render import make_console
    from headroom.report.render_projection import render_projection
    from headroom.trace.analysis import Analysis

    if step_ms is not None:
        unprofiled_step_us(None, step_ms)  # a positive number: checked before any trace is read
    entries, warnings = collect_entries(speedup or [], speedups or [])
    dist = load_distribution(distribution) if distribution else None
    pm = load_problems(problems)
    quantiles = tuple(quantile) if quantile else DEFAULT_QUANTILES
    if strict and warnings:
        raise UserError(f"{warnings[0]} (strict mode)")
    console = make_console()
    one = partial(
        project_one,
        entries=entries,
        dist=dist,
        win_rate=win_rate,
        median=median,
        scenario_select=scenario_select,
        quantiles=quantiles,
        strict=strict,
        pm=pm,
        warnings=warnings,
        step_ms=step_ms,
        on_rank=on_rank,
    )
    read = ReadOptions.from_flags(rules, policy, whole_trace, window, lenient, no_cache, graph_source)
    reader = Reader(read, engine=engine, address=address, product=one)
    for a in reader.inputs(traces):
        if not isinstance(a, Analysis):  # a RankSet
            if dist is not None or win_rate is not None or median is not None:
                raise UserError(
                    f"{a.source}: a directory of ranks takes --speedup/--speedups "
                    f"(--distribution, --win-rate and --median project one trace at a time)"
                )
            _project_ranks(a, entries, warnings, on_rank, pm, strict, as_json, console)
            continue
        res = reader.per_trace(a)
        for w in res.warnings:
            warn(f"{a.source}: {w}")
        if as_json:
            emit_json("project", plain(res))
        else:
            render_projection(res, console)
    reader.finish()


def _project_ranks(
    rs, entries: list, warnings: list[str], on_rank: list[int] | None, pm, strict: bool, as_json: bool, console
) -> None:
    """A directory of ranks projected per rank, then through the collectives (its modules imported only here: a
    single trace's start)."""
    from headroom.projection.sync_projection import project_ranks
    from headroom.report.rank_tables import rank_projection_notes, render_rank_projection

    rp = project_ranks(rs, entries, on_ranks=on_rank, problems=pm, strict=strict)
    rp.warnings = list(warnings) + rp.warnings
    for w in rank_projection_notes(rp):
        warn(f"{rs.source}: {w}")
    if as_json:
        emit_json("project.ranks", plain(rp))
    else:
        render_rank_projection(rp, console)


By = enum.Enum(
    "By",
    {"op": "op", "module": "module", "module_path": "module_path", "top_op": "top_op", "kernel": "kernel"},
    type=str,
)
RankBy = enum.Enum("RankBy", {"gain": "gain", "achievable": "achievable"}, type=str)
Scope = enum.Enum("Scope", {"self": "self", "total": "total"}, type=str)


def project_one(a, entries, dist, win_rate, median, scenario_select, quantiles, strict, pm, warnings, step_ms, on_rank):
    """One trace's projection (each trace's task computes it with --engine ray)."""
    from headroom.projection.overhead import check_step_ms
    from headroom.projection.project import project

    if on_rank:
        raise UserError(f"--on-rank: {a.source} is one trace, not a directory of ranks")
    if step_ms is not None:
        check_step_ms(a, step_ms)
    return project(
        a,
        entries,
        distribution=dist,
        win_rate=win_rate,
        median=median,
        scenario_select=scenario_select,
        quantiles=quantiles,
        strict=strict,
        problems=pm,
        extra_warnings=warnings,
        step_ms=step_ms,
    )


TraceArg = typer.Argument(
    ..., metavar="TRACE", help="Trace file (.json/.json.gz), or a directory of the ranks of one run."
)
ByOpt = typer.Option(
    None,
    "--by",
    help=(
        "Grouping: op, module (nn.Module classes), module_path (instances), top_op or kernel "
        "(repeatable; default op and module)."
    ),
)
ScopeOpt = typer.Option(
    "self",
    "--scope",
    case_sensitive=False,
    help=(
        "Module rows: self (kernels whose innermost module it is; shares add up) or total "
        "(also the kernels of the modules inside it)."
    ),
)
ReplayTopOpt = typer.Option(5, "--replay-top", min=0, help="Also replay the first N rows of each grouping (0: none).")
RooflineOpt = typer.Option(
    False,
    "--roofline",
    metavar="",
    help=(
        "Also each row's FLOPs and bytes (from the recorded shapes), achieved TFLOP/s and TB/s against the "
        "device's peaks, its limit, floor and max speedup (docs/targets.md)."
    ),
)
PeaksOpt = typer.Option(
    None,
    "--peaks",
    metavar="DEVICE",
    help=("With --roofline: the device whose peaks to use (h200, h100, a100, cpu; default the trace's GPU)."),
)
RankByOpt = typer.Option(
    "gain",
    "--rank-by",
    help=("gain (at --speedup) or achievable (with --roofline: at min(max speedup, --speedup))."),
)


def targets_cmd(
    trace: Path = TraceArg,
    speedup: float = typer.Option(1.5, "--speedup", "-s", min=1e-9, help="The speedup to rank by (default 1.5x)."),
    by: list[By] | None = ByOpt,
    scope: Scope = ScopeOpt,
    top: int = typer.Option(20, "--top", min=0, help="Rows per grouping (0: all)."),
    replay_top: int = ReplayTopOpt,
    as_json: bool = typer.Option(False, "--json", metavar="", help="One JSON document (docs/cli.md)."),
    roofline: bool = RooflineOpt,
    peaks: str | None = PeaksOpt,
    rank_by: RankBy = RankByOpt,
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
    """If one op got faster, which should it be? Ops and modules ranked by end-to-end gain.

    A directory of the ranks of one run: ranked by their effect on the synchronised step."""
    from headroom.projection.speedups import parse_factor
    from headroom.projection.targets import targets_dict
    from headroom.report.render import make_console
    from headroom.report.render_projection import render_targets
    from headroom.trace.analysis import Analysis

    parse_factor(speedup, "--speedup")
    if (peaks is not None or rank_by.value != "gain") and not roofline:
        raise UserError("--peaks and --rank-by achievable go with --roofline")
    if roofline and (engine != "local" or address is not None):
        raise UserError("--roofline reads its trace in this process: leave out --engine/--address")
    groupings = tuple(dict.fromkeys(b.value for b in by)) if by else ("op", "module")
    read = ReadOptions.from_flags(rules, policy, whole_trace, window, lenient, no_cache, graph_source)
    reader = Reader(
        read,
        engine=engine,
        address=address,
        product=partial(
            targets_one, speedup=speedup, groupings=groupings, top=top, replay_top=replay_top, scope=scope.value
        ),
    )
    inputs = list(reader.inputs([trace]))
    reader.finish()
    for a in inputs:
        if not isinstance(a, Analysis):  # a RankSet
            if roofline:
                raise UserError(f"{a.source}: --roofline takes one trace, not a directory of ranks")
            _rank_targets(a, speedup, groupings, top, as_json)
            continue
        if roofline:
            _roofline_targets(a, speedup, groupings, top, replay_top, scope.value, peaks, rank_by.value, as_json)
            continue
        table, missing = reader.per_trace(a)
        if missing:
            warn(missing)  # names the trace
        if as_json:
            emit_json("targets", targets_dict(a, table, speedup, notes=[missing] if missing else []))
            continue
        render_targets(a, table, speedup, make_console())


def _rank_targets(rs, speedup: float, groupings: tuple[str, ...], top: int, as_json: bool) -> None:
    """A directory of ranks' targets, ranked by their effect on the synchronised step (its modules imported only
    here: a single trace's start)."""
    from headroom.projection.sync_targets import sync_targets, sync_targets_dict
    from headroom.report.rank_tables import render_sync_targets
    from headroom.report.render import make_console

    table = sync_targets(rs, speedup=speedup, by=groupings, top=top)
    if as_json:
        emit_json("targets.ranks", sync_targets_dict(rs, table, speedup))
    else:
        render_sync_targets(rs, table, speedup, make_console())


def _roofline_targets(
    a,
    speedup: float,
    groupings: tuple[str, ...],
    top: int,
    replay_top: int,
    scope: str,
    peaks: str | None,
    rank_by: str,
    as_json: bool,
) -> None:
    """One trace's targets with each row's roofline (--roofline)."""
    from headroom.projection.roofline import roofline_targets
    from headroom.report.render import make_console
    from headroom.report.render_projection import render_targets
    from headroom.report.render_roofline import render_roofline

    res = roofline_targets(a, speedup, groupings, top or None, replay_top, scope, peaks, rank_by)
    for note in res.notes:
        warn(note)
    if as_json:
        emit_json("targets", plain(res))
        return
    console = make_console()
    render_targets(a, res.table, speedup, console)
    assert res.device is not None  # roofline targets name their device
    render_roofline(res.table, res.device, a.num_steps, speedup, console)


def targets_one(a, speedup, groupings, top, replay_top, scope):
    """One trace's targets table and its note (each trace's task computes them with --engine ray)."""
    from headroom.projection.targets import MODULE_KINDS, module_ranges_missing, targets

    table = targets(a, speedup=speedup, by=groupings, top=top, replay_top=replay_top, scope=scope)
    return table, (module_ranges_missing(a) if set(groupings) & set(MODULE_KINDS) else None)


Figure = enum.Enum("Figure", {"addressable": "addressable", "projection": "projection", "scaling": "scaling"}, type=str)
Format = enum.Enum("Format", {"png": "png", "svg": "svg", "pdf": "pdf"}, type=str)
Basis = enum.Enum("Basis", {"wall": "wall", "kernel": "kernel"}, type=str)


def plot_cmd(
    traces: list[Path] = typer.Argument(
        ..., metavar="TRACE...", help="Trace files or directories (one bar per trace)."
    ),
    out: Path = typer.Option(Path("out/plots"), "--out", "-o", metavar="DIR", help="Output directory."),
    figure: list[Figure] | None = typer.Option(
        None, "--figure", help="Which figures (repeatable; default: all that apply)."
    ),
    fmt: list[Format] | None = typer.Option(None, "--format", help="File formats (repeatable; default all three)."),
    label: list[str] | None = typer.Option(
        None, "--label", metavar="TEXT", help="Bar label per trace, in order (repeatable)."
    ),
    speedup: list[str] | None = SpeedupOpt,
    speedups: list[Path] | None = SpeedupsOpt,
    params: list[float] | None = typer.Option(
        None, "--params", metavar="N", min=1.0, help="Parameter count per trace for the scaling chart (repeatable)."
    ),
    family: str | None = typer.Option(None, "--family", metavar="TEXT", help="Family name for the scaling chart."),
    basis: Basis = typer.Option(
        "wall",
        "--basis",
        help=("wall: shares of the profiled window, idle shown; kernel: shares of GPU kernel time (idle left out)."),
    ),
    sidecar: bool = typer.Option(
        False, "--numbers", metavar="", help="Also write FIGURE.json: the numbers each figure draws."
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
    """Figures: addressable fraction per workload, projected step time, and scaling with model size."""
    from headroom.projection.problems import load_problems
    from headroom.projection.speedups import collect_entries
    from headroom.report.figures import check_plot_outputs, draw_figures, save_figures

    figures = [f.value for f in figure] if figure else None
    formats = [f.value for f in fmt] if fmt else None
    entries, entry_warnings = collect_entries(speedup or [], speedups or [])
    pm = load_problems(problems)
    check_plot_outputs(out, figures, formats, sidecar, [*traces, rules, policy, problems, *(speedups or [])])
    analyses = read_all(
        traces, ReadOptions.from_flags(rules, policy, whole_trace, window, lenient, no_cache, graph_source)
    )
    plots = draw_figures(
        analyses, figures, label or None, entries, entry_warnings, params, family, basis.value, sidecar, pm
    )
    for w in plots.warnings:
        warn(w)
    for p in save_figures(plots, out, formats):
        print(p)


def register(app: typer.Typer) -> None:
    app.command("project")(project_cmd)
    app.command("targets")(targets_cmd)
    app.command("plot")(plot_cmd)
