"""Readable tables of analyses (rich), and the cross-workload summary.

Numbers come from `Analysis`; this module only arranges and prints them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from headroom.analysis import MODE_CPU, Analysis

NOT_ADDRESSABLE_CORE = ("gemm", "attention", "conv")


def make_console() -> Console:
    """A console that does not squeeze tables to 80 columns when output is piped."""
    c = Console()
    return c if c.is_terminal else Console(width=160)


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def workload_label(a: Analysis) -> str:
    m = a.manifest
    if m.get("workload"):
        variant = m.get("variant") or ""
        return f"{m['workload']}{' ' + variant if variant else ''}"
    name = Path(a.source).name
    for suffix in (".json.gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name


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


def summary_frame(analyses: list[Analysis]) -> pd.DataFrame:
    """One row per trace: the cross-workload table of `headroom report`."""
    rows = []
    for a in analyses:
        cats = a.categories.set_index("name")["fraction"] if len(a.categories) else pd.Series(dtype=float)
        core = float(sum(cats.get(c, 0.0) for c in NOT_ADDRESSABLE_CORE))
        addr_ops = a.ops[a.ops["addressable_us"] > 0].sort_values("addressable_us", ascending=False)
        top = addr_ops.iloc[0] if len(addr_ops) else None
        m = a.manifest
        rows.append({
            "workload": workload_label(a),
            "trace": a.source,
            "mode": a.mode,
            "device": a.device_name,
            "step_ms": a.step_us / 1000,
            "gpu_ms_per_step": a.total_us / max(a.num_steps, 1) / 1000,
            "idle_fraction": a.idle_fraction,
            "gemm_attention_conv_fraction": core,
            "addressable_fraction": a.addressable_fraction,
            "top_addressable_op": top["op"] if top is not None else "",
            "top_addressable_op_fraction": float(top["addressable_us"]) / a.total_us if top is not None and a.total_us else 0.0,
            "dtype": m.get("dtype", ""),
            "batch": m.get("batch", ""),
        })
    return pd.DataFrame(rows)


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
