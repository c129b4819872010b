"""`headroom classify`, `headroom annotate`, `headroom report`: reading traces."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from headroom.cli.ranks import analysed_inputs
from headroom.jsonio import dumps
from headroom.report.annotate import annotate_trace
from headroom.report.ranks import rank_summary_frame, render_rank_set, render_rank_summary
from headroom.report.render import make_console, render_analysis, render_summary
from headroom.report.tables import summary_frame
from headroom.trace.analysis import Analysis
from headroom.trace.ranks import RankSet

RulesOpt = typer.Option(None, "--rules", help="TOML file of extra classification rules (tried first).")
PolicyOpt = typer.Option(None, "--policy", help="TOML file overriding which categories are addressable.")


def classify(
    traces: List[Path] = typer.Argument(..., help="Trace files (.json/.json.gz) or directories of per-rank traces."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per trace, one per line."),
    all_kernels: bool = typer.Option(False, "--all", help="Also list every distinct kernel (with --json: a 'kernels' key)."),
    rules: Optional[Path] = RulesOpt,
    policy: Optional[Path] = PolicyOpt,
    whole_trace: bool = typer.Option(False, "--whole-trace", help="Use the whole trace, not only ProfilerStep ranges."),
    per_rank: bool = typer.Option(False, "--per-rank", help="A directory of ranks: also each rank's own table."),
) -> None:
    """Where did the GPU time go? Categories, busy/idle, and the addressable fraction.

    A directory holding the ranks of one run is analysed together: ranks side by side,
    communication overlapped and exposed, waits and the slowest rank (docs/distributed.md)."""
    console = make_console()
    for a in analysed_inputs(traces, rules, policy, whole_trace):
        if isinstance(a, RankSet):
            if as_json:
                print(dumps(a.to_dict(all_kernels=all_kernels)))
                continue
            render_rank_set(a, console)
            console.print()
            for one in a.analyses if per_rank else []:
                render_analysis(one, console)
                console.print()
            continue
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
) -> None:
    """One row per trace: step time, idle share, addressable fraction, top addressable op.

    A directory of the ranks of one run: one row per rank, with its communication and waits."""
    inputs = analysed_inputs([path])
    if inputs and isinstance(inputs[0], RankSet):
        rs = inputs[0]
        df = rank_summary_frame(rs)
        if as_json:
            print(dumps({"source": rs.source, "kind": "ranks", "step_ms": rs.step_us / 1000,
                         "slowest_rank": rs.slowest_rank, "rows": df.to_dict(orient="records")}))
        else:
            render_rank_summary(rs, df, make_console())
        return
    analyses = [a for a in inputs if isinstance(a, Analysis)]
    df = summary_frame(analyses)
    if as_json:
        print(df.to_json(orient="records"))
    else:
        render_summary(df, make_console())


def register(app: typer.Typer) -> None:
    app.command()(classify)
    app.command()(annotate)
    app.command()(report)
