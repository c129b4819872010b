"""`headroom classify`, `headroom annotate`, `headroom report`: reading traces."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from headroom.jsonio import dumps
from headroom.report.annotate import annotate_trace
from headroom.report.render import make_console, render_analysis, render_summary
from headroom.report.tables import summary_frame
from headroom.trace.analysis import analyze_files, analyze_path
from headroom.trace.classify import load_policy, load_rules
from headroom.trace.load import find_trace_files

RulesOpt = typer.Option(None, "--rules", help="TOML file of extra classification rules (tried first).")
PolicyOpt = typer.Option(None, "--policy", help="TOML file overriding which categories are addressable.")
LenientOpt = typer.Option(False, "--lenient", help=(
    "Drop GPU activities and steps with impossible times (missing, negative, non-finite, outside the trace) "
    "with a counted warning, instead of refusing the trace."))
NoCacheOpt = typer.Option(False, "--no-cache", help="Neither read nor write the trace's columnar cache.")


def print_warnings(analysis) -> None:
    """The loader's and the attribution's warnings, one line each on stderr."""
    for w in analysis.warnings:
        print(f"headroom: warning: {analysis.source}: {w}", file=sys.stderr)


def classify(
    traces: List[Path] = typer.Argument(..., help="Trace files (.json/.json.gz) or directories of per-rank traces."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per trace, one per line."),
    all_kernels: bool = typer.Option(False, "--all", help="Also list every distinct kernel (with --json: a 'kernels' key)."),
    rules: Optional[Path] = RulesOpt,
    policy: Optional[Path] = PolicyOpt,
    whole_trace: bool = typer.Option(False, "--whole-trace", help="Use the whole trace, not only ProfilerStep ranges."),
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
) -> None:
    """Where did the GPU time go? Categories, busy/idle, and the addressable fraction."""
    compiled_rules, compiled_policy = load_rules(rules), load_policy(policy)
    console = make_console()
    files = [f for t in traces for f in find_trace_files(t)]
    for a in analyze_files(files, rules=compiled_rules, policy=compiled_policy, whole_trace=whole_trace,
                           lenient=lenient, use_cache=not no_cache):
        print_warnings(a)
        if as_json:
            print(dumps(a.to_dict(all_kernels=all_kernels)))
            continue
        render_analysis(a, console)
        if all_kernels:
            for r in a.kernels.itertuples(index=False):
                console.print(f"  {r.us / 1000:>10,.3f} ms  x{r.count:<6} {r.category:<13} {r.op[:40]:<40} {r.name[:120]}",
                              markup=False, highlight=False)
        console.print()


def annotate(
    trace: Path = typer.Argument(..., help="Trace to annotate."),
    out: Path = typer.Option(..., "-o", "--out", help="Output trace (.json or .json.gz)."),
    rules: Optional[Path] = RulesOpt,
    policy: Optional[Path] = PolicyOpt,
) -> None:
    """Write the trace back with each kernel's category in its args (for Perfetto)."""
    n = annotate_trace(trace, out, rules=rules, policy=policy)
    print(f"annotated {n} GPU events -> {out}")


def report(
    path: Path = typer.Argument(Path("traces"), help="Directory of traces (e.g. traces/)."),
    as_json: bool = typer.Option(False, "--json", help="The table as a JSON list."),
    lenient: bool = LenientOpt,
    no_cache: bool = NoCacheOpt,
) -> None:
    """One row per trace: step time, idle share, addressable fraction, top addressable op."""
    analyses = analyze_path(path, lenient=lenient, use_cache=not no_cache)
    for a in analyses:
        print_warnings(a)
    df = summary_frame(analyses)
    if as_json:
        print(df.to_json(orient="records"))
    else:
        render_summary(df, make_console())


def register(app: typer.Typer) -> None:
    app.command()(classify)
    app.command()(annotate)
    app.command()(report)
