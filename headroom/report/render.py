"""Readable tables of analyses (rich), and the cross-workload summary.

Numbers come from `Analysis`; this module only arranges and prints them.
"""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table

from headroom.profile.run import ProfileResult
from headroom.profile.workload import WorkloadSpec
from headroom.projection.project import ProjectResult
from headroom.trace.analysis import MODE_CPU, Analysis

def make_console() -> Console:
    """A console that does not squeeze tables to 80 columns when output is piped."""
    c = Console()
    return c if c.is_terminal else Console(width=160)


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_analysis(a: Analysis, console: Console, top_unknown: int = 10) -> None:
    unit = "CPU op self time" if a.mode == MODE_CPU else "GPU time"
    console.print(f"[bold]{a.source}[/bold]  {a.device_name or ''}")
    if a.mode == MODE_CPU:
        console.print("[yellow]no GPU activity in this trace: classified by CPU operator (self time)[/yellow]")
    console.print(
        f"steps {a.num_steps}   step {_ms(a.step_us)} ms   wall {_ms(a.wall_us)} ms   "
        f"busy {_ms(a.busy_us)} ms   idle {_pct(a.idle_fraction)}   {unit} {_ms(a.total_us)} ms")
    t = Table(show_edge=False, header_style="bold")
    t.add_column("category")
    t.add_column("ms", justify="right")
    t.add_column(f"% of {unit}", justify="right")
    t.add_column("% of wall", justify="right")
    t.add_column("count", justify="right")
    t.add_column("addressable")
    for r in a.categories.itertuples(index=False):
        t.add_row(r.name, _ms(r.us), _pct(r.fraction), _pct(r.wall_fraction), f"{r.count:,}",
                  "[green]yes[/green]" if r.addressable else "no")
    console.print(t)
    console.print(f"[bold]addressable: {_pct(a.addressable_fraction)}[/bold] of {unit} "
                  f"({_ms(a.addressable_us)} ms)")
    unknown = a.unknown_kernels(top_unknown)
    if len(unknown):
        console.print("unclassified kernels ('other'), by time:")
        for r in unknown.itertuples(index=False):
            console.print(f"  {_ms(r.us):>10} ms  x{r.count:<6} {r.name[:140]}")


def render_summary(df: pd.DataFrame, console: Console) -> None:
    t = Table(show_edge=False, header_style="bold")
    for col, just in (("workload", "left"), ("device", "left"), ("step ms", "right"), ("idle", "right"),
                      ("GEMM+attn+conv", "right"), ("addressable", "right"), ("top addressable op", "left")):
        t.add_column(col, justify=just)
    for r in df.itertuples(index=False):
        top = f"{r.top_addressable_op} ({_pct(r.top_addressable_op_fraction)})" if r.top_addressable_op else ""
        t.add_row(r.workload, r.device or r.mode, f"{r.step_ms:,.2f}", _pct(r.idle_fraction),
                  _pct(r.gemm_attention_conv_fraction), _pct(r.addressable_fraction), top)
    console.print(t)


def _pct2(x: float) -> str:
    return f"{100 * x:.2f}%"


def render_projection(res: ProjectResult, console: Console) -> None:
    """`headroom project`: the measured breakdown, the speedup entries, the projections, the warnings."""
    console.print(f"[bold]{res.source}[/bold]")
    b = res.baseline.to_dict()
    console.print(
        f"measured: {res.baseline_us / 1e3:,.3f} ms over {res.num_steps} step(s) = {res.per_step_us / 1e3:,.3f} ms/step   "
        f"kernels {_pct2(b['kernel_fraction'])}  memory {_pct2(b['memory_fraction'])}  "
        f"communication {_pct2(b['communication_fraction'])}  idle {_pct2(b['idle_fraction'])}", highlight=False)
    if res.entries:
        t = Table(show_edge=False, header_style="bold", title="speedups", title_justify="left")
        show_source = any(e["source"] != "command line" for e in res.entries)
        cols = [("selector", "left"), ("factor", "right"), ("verified", "left"), ("kernels", "right"),
                ("ms", "right"), ("applied ms", "right"), ("addressable", "right"), ("top kernel", "left")]
        if show_source:
            cols.append(("source", "left"))
        for c, j in cols:
            t.add_column(c, justify=j, no_wrap=c != "selector", overflow="fold" if c == "selector" else "ellipsis",
                         min_width=24 if c == "selector" else None,
                         max_width=36 if c in ("top kernel", "source") else None)
        for e in res.entries:
            top = e["top_kernels"][0]["name"] if e["top_kernels"] else ""
            addr = f"{100 * e['addressable_us'] / e['us']:.0f}%" if e["us"] > 0 else "-"
            row = [e["selector"], f"{e['speedup']:g}", {True: "yes", False: "no", None: ""}[e["verified"]],
                   f"{e['kernels']:,}", f"{e['us'] / 1e3:,.3f}", f"{e['applied_us'] / 1e3:,.3f}", addr, top]
            if show_source:
                row.append(e["source"])
            t.add_row(*row)
        console.print(t)
    if res.distribution:
        d = res.distribution
        extra = ""
        if "n" in d:
            extra = f"  ({d['n']} results from {d.get('source', '')})"
        console.print(f"distribution scenarios over [bold]{d['select']}[/bold] "
                      f"({d['selected_us'] / 1e3:,.3f} ms of kernels){extra}", highlight=False)
    t = Table(show_edge=False, header_style="bold", title="projections", title_justify="left")
    for c, j in (("scenario", "left"), ("method", "left"), ("factor", "right"), ("ms/step", "right"),
                 ("saved", "right"), ("end-to-end", "right"), ("kernels", "right"), ("mem+comm", "right"),
                 ("idle", "right")):
        t.add_column(c, justify=j)
    for p in res.projections:
        bd = p.breakdown.to_dict()
        fac = "" if p.factor is None else ("inf" if not math.isfinite(p.factor) else f"{p.factor:.4g}")
        t.add_row(p.scenario, p.method, fac, f"{p.per_step_us / 1e3:,.3f}", _pct2(p.gain), f"{p.speedup:.4f}x",
                  _pct2(bd["kernel_fraction"]), _pct2(bd["memory_fraction"] + bd["communication_fraction"]),
                  _pct2(bd["idle_fraction"]))
    console.print(t)
    for w in res.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    console.print()


def render_targets(a: Analysis, table: pd.DataFrame, speedup: float, console: Console) -> None:
    """`headroom targets`: one table per grouping (op, module, ...), ranked by end-to-end gain."""
    console.print(f"[bold]{a.source}[/bold]  measured {a.step_us / 1e3:,.3f} ms/step over {a.num_steps} step(s)",
                  highlight=False)
    for kind in dict.fromkeys(table["kind"]):
        t = Table(show_edge=False, header_style="bold", title=f"by {kind}", title_justify="left")
        cols = [("name", "left"), ("category", "left"), ("addressable", "left"), ("kernels", "right"),
                ("ms", "right"), ("share", "right"), (f"gain @{speedup:g}x", "right"), ("gain @inf", "right")]
        has_replay = "replay_gain" in table.columns
        if has_replay:
            cols += [(f"replay @{speedup:g}x", "right"), ("replay @inf", "right")]
        for c, j in cols:
            t.add_column(c, justify=j)
        for r in table[table["kind"] == kind].itertuples(index=False):
            row = [r.name[:70], r.category, r.addressable, f"{r.kernels:,}", f"{r.us / 1e3:,.3f}", _pct2(r.share),
                   _pct2(r.gain), _pct2(r.gain_inf)]
            if has_replay:
                row += ["" if not math.isfinite(r.replay_gain) else _pct2(r.replay_gain),
                        "" if not math.isfinite(r.replay_gain_inf) else _pct2(r.replay_gain_inf)]
            t.add_row(*row)
        console.print(t)
    console.print("gain: fraction of the measured window saved (Amdahl; replay where shown)")


def render_profile(result: ProfileResult, console: Console) -> None:
    """`headroom profile`: the classification, then timing, overhead, idle share, addressable fraction,
    extrapolation."""
    a = result.analysis
    cfg = result.config
    render_analysis(a, console)
    unit = "CPU op time" if a.mode == MODE_CPU else "GPU time"
    t, p = result.timed, result.profiled
    console.print()
    if t.n:
        console.print(f"[bold]step time[/bold]        {t.median_ms:,.2f} ms  (median of {t.n}, {t.method}; "
                      f"min {t.min_ms:,.2f}, max {t.max_ms:,.2f})", highlight=False)
        noisy = "; few CPU steps: indicative only" if a.mode == MODE_CPU else ""
        console.print(f"profiler overhead  {100 * result.overhead:+.1f}%  (profiled median {p.median_ms:,.2f} ms "
                      f"over {p.n} steps{noisy})", highlight=False)
    else:
        console.print(f"[bold]step time[/bold]        {p.median_ms:,.2f} ms  (profiled; no unprofiled steps timed)",
                      highlight=False)
    if a.mode == MODE_CPU:
        console.print("idle share         n/a (no GPU)")
    else:
        console.print(f"GPU idle share     {_pct(a.idle_fraction)} of the profiled wall time")
    console.print(f"[bold]addressable[/bold]      {_pct(a.addressable_fraction)} of {unit}", highlight=False)
    x = result.layers
    if x is not None and cfg.extrapolated:
        console.print()
        console.print(f"[bold]extrapolated to {x.total} of {x.total} blocks[/bold] from {x.built} "
                      f"(per-block time x{x.factor:g}; {_pct(x.block_share)} of the measured time is in blocks)")
        table = Table(show_edge=False, header_style="bold")
        table.add_column("category")
        table.add_column(f"% of {unit} ({x.total} blocks)", justify="right")
        table.add_column(f"measured ({x.built} blocks)", justify="right")
        table.add_column("addressable")
        for r in x.categories.itertuples(index=False):
            table.add_row(r.name, _pct(r.fraction), _pct(r.measured_fraction), "yes" if r.addressable else "no")
        console.print(table)
        est = f"{x.timed_step_ms_extrapolated:,.2f} ms" if x.timed_step_ms_extrapolated else \
            f"{x.step_us_extrapolated / 1000:,.2f} ms (profiled)"
        console.print(f"[bold]step time, {x.total} blocks (estimated)[/bold]  {est}", highlight=False)
        console.print(f"[bold]addressable, {x.total} blocks[/bold]  {_pct(x.addressable_fraction)} of {unit}",
                      highlight=False)
    info = result.manifest.get("info", {})
    if info.get("embedding_path"):
        console.print(f"embeddings: {info['embedding_path']}", highlight=False)
    for note in cfg.notes:
        console.print(f"[yellow]scaled for the CPU:[/yellow] {note}", highlight=False)
    console.print(f"trace: {result.trace_path}   manifest: {result.manifest_path}", highlight=False)


def render_workloads(specs: list[WorkloadSpec], verbose: bool, console: Console) -> None:
    """`headroom workloads [-v]`: the registry as a table, and each default's reason."""
    t = Table(show_edge=False, header_style="bold")
    for col in ("workload", "domain", "mode", "batch", "seq", "dtype", "blocks", "model"):
        t.add_column(col)
    for s in specs:
        t.add_row(s.name, s.domain, s.default("mode"), str(s.default("batch")), str(s.default("seq") or "-"),
                  str(s.default("dtype")), str(s.num_layers("default")) if s.num_layers else "-", s.model)
    console.print(t)
    if not verbose:
        console.print("(-v for the reason behind each default, flavours and options)")
        return
    for s in specs:
        console.print(f"\n[bold]{s.name}[/bold]  {s.description}", highlight=False)
        for k, d in s.defaults.items():
            console.print(f"  {k:<18} {str(d.value):<10} {d.why}", highlight=False)
        console.print(f"  flavours: {', '.join(f'{k} ({v})' for k, v in s.flavours.items())}", highlight=False)
        for k, d in s.extras.items():
            console.print(f"  --opt {k}={d.value}: {d.why}", highlight=False)
        if s.cpu_scale:
            console.print("  on a CPU: " + "; ".join(f"{k} -> {v[0]} ({v[1]})" for k, v in s.cpu_scale.items()),
                          highlight=False)
