"""Readable tables of analyses (rich), and the cross-workload summary.

Numbers come from `Analysis`; this module only arranges and prints them.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console
from rich.markup import escape as rich_escape
from rich.table import Table
from rich.text import Text

from headroom.trace.analysis_terms import MODE_CPU, partial_layers, run_label, steps_phrase

if TYPE_CHECKING:  # annotations only: printing an analysis imports no profiler or projector
    from headroom.profile.result import ProfileResult
    from headroom.profile.workload import WorkloadSpec

# A column's alignment (rich's JustifyMethod).
Justify = Literal["left", "right"]

_INNER_TEMPLATE = re.compile(r"<[^<>]*>")
_ELLIPSIS = "\u2026"


def _depth(text: str) -> int:
    d = best = 0
    for ch in text:
        if ch == "<":
            d += 1
            best = max(best, d)
        elif ch == ">":
            d = max(d - 1, 0)
    return best


def short_name(name: str, width: int = 72) -> str:
    """A kernel or op name that fits `width` characters, shortened by its structure: the `void`
    return type, then the parameter list, then nested template arguments (innermost first), then
    namespaces inside the arguments, then the function's namespaces, then the remaining template
    arguments; only then cut in the middle. Names that fit are left alone (JSON keeps them whole)."""
    n = " ".join(str(name).split())
    if n.startswith("void "):
        n = n[5:]
    if len(n) <= width:
        return n
    n = n.replace("(anonymous namespace)", "{anon}")
    depth = 0
    for i, ch in enumerate(n):  # the parameter list: the first '(' outside template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0 and i > 0:
            n = n[:i] + "(" + _ELLIPSIS + ")"
            break

    def size(t: str) -> int:  # as printed: `<…>` for each collapsed argument list, the namespace in full
        return len(t) + 2 * t.count("\x00") + (len("(anonymous namespace)") - len("{anon}")) * t.count("{anon}")

    while size(n) > width and _depth(n) >= 2:  # nested template arguments, innermost first
        n = _INNER_TEMPLATE.sub("\x00", n, count=1)
    head, sep, tail = n.partition("<")
    if size(n) > width and sep:  # namespaces inside the arguments
        tail = re.sub(r"(\{anon\}::|\b[A-Za-z_]\w*::)+", "", tail)
        n = head + sep + tail
    if size(n) > width and "::" in head:  # the function's namespaces
        n = _ELLIPSIS + "::" + head.rsplit("::", 1)[1] + sep + tail
    while size(n) > width and _INNER_TEMPLATE.search(n):
        n = _INNER_TEMPLATE.sub("\x00", n, count=1)
    n = n.replace("\x00", "<" + _ELLIPSIS + ">").replace("{anon}", "(anonymous namespace)")
    if len(n) > width:
        keep = width - 1
        n = n[: (keep + 1) // 2] + _ELLIPSIS + n[len(n) - keep // 2 :]
    return n


class _Console(Console):
    """rich's Console, but a reader that leaves (`| head -1`) is the BrokenPipeError the command line
    turns into exit 141 (docs/cli.md), not rich's own silent exit 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def make_console() -> Console:
    """A console that does not squeeze tables to 80 columns when output is piped, and reads no markup: text
    from traces and paths (`[rich]markup.json.gz`, a kernel name) prints as it is. `say` prints headroom's
    own styled lines, each value in them through `esc`."""
    c = _Console(markup=False)
    return c if c.is_terminal else _Console(width=220, markup=False)


def esc(value: object) -> str:
    """A value's text, safe inside a line `say` prints: its `[` cannot open a style."""
    return rich_escape(str(value))


def say(console: Console, line: str, **kw: Any) -> None:
    """Print one of headroom's own lines with its styles (`[bold]...[/bold]`): every value interpolated in
    `line` goes through `esc`."""
    console.print(line, markup=True, **kw)


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_analysis(doc: dict[str, Any], console: Console, top_unknown: int = 10) -> None:
    """`headroom classify`: milliseconds per step (the whole trace counts as one), totals labelled; from the
    `classify --json` body (headroom/report/summary.py), so the text says what the JSON says."""
    mode, source, manifest = doc["mode"], doc["trace"], doc.get("manifest") or {}
    unit = "CPU op self time" if mode == MODE_CPU else "GPU time"
    n = max(doc["num_steps"], 1)
    say(console, f"[bold]{esc(source)}[/bold]  {esc(doc['device'] or '')}", highlight=False)
    if manifest.get("workload"):
        part = partial_layers(manifest)
        console.print(
            f"{run_label(manifest, source)}"
            + (
                f": the numbers below are for the {part[0]} profiled blocks "
                f"(headroom profile extrapolates to {part[1]})"
                if part
                else ""
            ),
            highlight=False,
        )
    if mode == MODE_CPU:
        say(console, "[yellow]no GPU activity in this trace: classified by CPU operator (self time)[/yellow]")
    console.print(
        f"per step: {_ms(doc['step_us'])} ms wall   {_ms(doc['busy_us'] / n)} ms busy   "
        f"idle {_pct(doc['idle_fraction'])}   {unit} {_ms(doc['total_us'] / n)} ms   "
        f"({steps_phrase(doc['basis'], doc['num_steps'])}; total wall {_ms(doc['wall_us'])} ms)",
        highlight=False,
    )
    unprofiled = doc.get("unprofiled")
    if unprofiled is not None:
        idle_u = unprofiled["idle_fraction"]
        console.print(
            f"without the profiler: {_ms(unprofiled['step_us'])} ms per step"
            + (f"   implied idle {_pct(idle_u)}" if idle_u is not None else ""),
            highlight=False,
        )
    t = Table(show_edge=False, header_style="bold")
    t.add_column("category")
    t.add_column("ms/step", justify="right")
    t.add_column(f"% of {unit}", justify="right")
    t.add_column("% of wall", justify="right")
    t.add_column("count/step", justify="right")
    t.add_column("addressable")
    for r in doc["categories"]:
        t.add_row(
            r["name"],
            _ms(r["us"] / n),
            _pct(r["fraction"]),
            _pct(r["wall_fraction"]),
            count_per_step(r["count"] / n),
            Text("yes", style="green") if r["addressable"] else "no",
        )
    console.print(t)
    say(
        console,
        f"[bold]addressable: {_pct(doc['addressable_fraction'])}[/bold] of {unit} "
        f"({_ms(doc['addressable_us'] / n)} ms/step)",
        highlight=False,
    )
    unknown = doc["unknown"][:top_unknown]
    if unknown:
        console.print("unclassified kernels ('other'), by time (ms/step):")
        for r in unknown:
            console.print(
                f"  {_ms(r['us'] / n):>10}  x{count_per_step(r['count'] / n):<6} {short_name(r['name'], 110)}",
                markup=False,
                highlight=False,
            )


def render_kernels(doc: dict[str, Any], console: Console) -> None:
    """`headroom classify --all`: every distinct kernel (the `classify --all --json` body's `kernels`), ms per
    step, names shortened by structure."""
    n = max(doc["num_steps"], 1)
    console.print("kernels, by time (ms/step, launches/step, category, op, kernel):", highlight=False)
    for r in doc["kernels"]:
        console.print(
            f"  {r['us'] / n / 1000:>10,.3f}  x{count_per_step(r['count'] / n):<6} {r['category']:<13} "
            f"{short_name(r['op'], 40):<40} {short_name(r['name'], 90)}",
            markup=False,
            highlight=False,
        )


def render_summary(rows: list[dict[str, Any]], console: Console) -> None:
    """`headroom report`: one row per trace (summary.report_rows; an unknown number is None)."""
    t = Table(show_edge=False, header_style="bold")
    summary_cols: tuple[tuple[str, Justify], ...] = (
        ("workload", "left"),
        ("device", "left"),
        ("ms/step", "right"),
        ("idle", "right"),
        ("unprof. ms/step", "right"),
        ("unprof. idle", "right"),
        ("GEMM+attn+conv", "right"),
        ("addressable", "right"),
        ("top addressable op", "left"),
        ("share", "right"),
    )
    for col, just in summary_cols:
        t.add_column(col, justify=just, no_wrap=True)
    for r in rows:
        top = short_name(r["top_addressable_op"], 40) if r["top_addressable_op"] else ""
        u_ms, u_idle = r["unprofiled_step_us"], r["unprofiled_idle_fraction"]
        t.add_row(
            r["workload"],
            r["device"] or r["mode"],
            f"{r['step_us'] / 1000:,.2f}",
            _pct(r["idle_fraction"]),
            "" if u_ms is None or math.isnan(u_ms) else f"{u_ms / 1000:,.2f}",
            "" if u_idle is None or math.isnan(u_idle) else _pct(u_idle),
            _pct(r["gemm_attention_conv_fraction"]),
            _pct(r["addressable_fraction"]),
            top,
            _pct(r["top_addressable_op_fraction"]) if top else "",
        )
    console.print(t)


def count_per_step(x: float) -> str:
    """A count per step: whole counts as they are; a kernel that runs once in three steps is 0.333, not
    "0" (which reads as never)."""
    if abs(x - round(x)) < 1e-9 or x >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def render_profile(result: ProfileResult, console: Console) -> None:
    """`headroom profile`: the classification, then timing, overhead, idle share, addressable fraction,
    extrapolation."""
    a = result.analysis
    assert a is not None, "a profile run's result carries its analysis"
    cfg = result.config
    render_analysis(a.to_dict(), console)
    unit = "CPU op time" if a.mode == MODE_CPU else "GPU time"
    t, p = result.timed, result.profiled
    console.print()
    from headroom.profile.result import overhead_verdict

    if t.n:
        say(
            console,
            f"[bold]step time[/bold]        {t.median_ms:,.2f} ms  (median of {t.n}, {esc(t.method)}; "
            f"min {t.min_ms:,.2f}, max {t.max_ms:,.2f})",
            highlight=False,
        )
        console.print(
            f"profiler overhead  {overhead_verdict(t, p)[1]}  (profiled median {p.median_ms:,.2f} ms "
            f"over {p.n} step(s))",
            highlight=False,
        )
    if a.mode == MODE_CPU:
        console.print("idle share         n/a (no GPU)")
    else:
        console.print(f"GPU idle share     {_pct(a.idle_fraction)} of the profiled wall time")
    say(console, f"[bold]addressable[/bold]      {_pct(a.addressable_fraction)} of {unit}", highlight=False)
    x = result.layers
    if x is not None and cfg.extrapolated:
        console.print()
        say(
            console,
            f"[bold]{esc(a.label)}, extrapolated to all {x.total}[/bold] "
            f"(per-block time x{x.factor:g}; {_pct(x.block_share)} of the measured time is in blocks)",
            highlight=False,
        )
        table = Table(show_edge=False, header_style="bold")
        table.add_column("category")
        table.add_column(f"% of {unit} ({x.total} blocks)", justify="right")
        table.add_column(f"measured ({x.built} blocks)", justify="right")
        table.add_column("addressable")
        for r in x.categories.itertuples(index=False):
            table.add_row(r.name, _pct(r.fraction), _pct(r.measured_fraction), "yes" if r.addressable else "no")
        console.print(table)
        est = (
            f"{x.timed_step_ms_extrapolated:,.2f} ms"
            if x.timed_step_ms_extrapolated
            else f"{x.step_us_extrapolated / 1000:,.2f} ms (profiled)"
        )
        say(console, f"[bold]step time, {x.total} blocks (estimated)[/bold]  {est}", highlight=False)
        say(
            console,
            f"[bold]addressable, {x.total} blocks[/bold]  {_pct(x.addressable_fraction)} of {unit}",
            highlight=False,
        )
    info = result.manifest.get("info", {})
    if info.get("embedding_path"):
        console.print(f"embeddings: {info['embedding_path']}", highlight=False)
    for note in cfg.notes:
        say(console, f"[yellow]scaled for the CPU:[/yellow] {esc(note)}", highlight=False)
    console.print(f"trace: {result.trace_path}   manifest: {result.manifest_path}", highlight=False)


def render_workloads(specs: list[WorkloadSpec], verbose: bool, console: Console) -> None:
    """`headroom workloads [-v]`: the registry as a table, and each default's reason."""
    t = Table(show_edge=False, header_style="bold")
    for col in ("workload", "domain", "mode", "batch", "seq", "dtype", "blocks", "model"):
        t.add_column(col)
    for s in specs:
        t.add_row(
            s.name,
            s.domain,
            s.default("mode"),
            str(s.default("batch")),
            str(s.default("seq") or "-"),
            str(s.default("dtype")),
            str(s.num_layers("default")) if s.num_layers else "-",
            s.model,
        )
    console.print(t)
    if not verbose:
        console.print("(-v for the reason behind each default, flavours and options)")
        return
    for s in specs:
        say(console, f"\n[bold]{esc(s.name)}[/bold]  {esc(s.description)}", highlight=False)
        for k, d in s.defaults.items():
            console.print(f"  {k:<18} {str(d.value):<10} {d.why}", highlight=False)
        console.print(f"  flavours: {', '.join(f'{k} ({v})' for k, v in s.flavours.items())}", highlight=False)
        for k, d in s.extras.items():
            console.print(f"  --opt {k}={d.value}: {d.why}", highlight=False)
        if s.parallel:
            console.print(f"  --nproc N --parallel {' | '.join(s.parallel)} (default {s.parallel[0]})", highlight=False)
        if s.cpu_scale:
            console.print(
                "  on a CPU: " + "; ".join(f"{k} -> {v[0]} ({v[1]})" for k, v in s.cpu_scale.items()), highlight=False
            )
