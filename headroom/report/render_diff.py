"""`headroom diff` on screen: the step times of the two runs, then the rows that changed (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from headroom.report.diff import Diff
from headroom.report.render import esc, say, short_name


def _ms(us: float) -> str:
    return f"{us / 1e3:,.3f}"


def _signed_ms(us: float) -> str:
    return f"{us / 1e3:+,.3f}"


def render_diff(d: Diff, console: Console, top: int | None = 25) -> None:
    """The step (profiled, and unprofiled where both manifests record it), then one row per group,
    largest change first (`top`: how many; the rest are summed in a last line)."""
    say(console, f"[bold]before[/bold] {esc(d.before)}  ({esc(d.labels[0])})", highlight=False)
    say(console, f"[bold]after[/bold]  {esc(d.after)}  ({esc(d.labels[1])})", highlight=False)
    for s in filter(None, (d.profiled, d.unprofiled)):
        console.print(
            f"{s.clock} step: {_ms(s.before_us)} -> {_ms(s.after_us)} ms/step "
            f"({_signed_ms(s.after_us - s.before_us)} ms, {100 * s.change:+.2f}%), "
            f"speedup {s.speedup:.4f}x",
            highlight=False,
        )
    t = Table(
        show_edge=False,
        header_style="bold",
        title=f"by {d.by} (GPU time per step)" if d.mode == "gpu" else f"by {d.by} (CPU op self time per step)",
        title_justify="left",
    )
    for c in ("name", "category", "status"):
        t.add_column(c, justify="left")
    for c in ("before ms", "after ms", "delta ms", "share of change", "kernels/step"):
        t.add_column(c, justify="right")
    rows = d.rows if top is None else d.rows.head(top)
    for r in rows.itertuples(index=False):
        t.add_row(
            short_name(r.name, 70),
            str(r.category),
            r.status,
            _ms(r.before_us),
            _ms(r.after_us),
            _signed_ms(r.delta_us),
            f"{100 * r.share:.1f}%",
            f"{r.before_kernels:,.4g} -> {r.after_kernels:,.4g}",
        )
    rest = d.rows.iloc[len(rows) :]
    if len(rest):
        t.add_row(
            f"({len(rest)} more rows)",
            "",
            "",
            _ms(rest["before_us"].sum()),
            _ms(rest["after_us"].sum()),
            _signed_ms(rest["delta_us"].sum()),
            f"{100 * rest['share'].sum():.1f}%",
            "",
        )
    t.add_row(
        "total",
        "",
        "",
        _ms(d.kernel_us[0]),
        _ms(d.kernel_us[1]),
        _signed_ms(d.kernel_us[1] - d.kernel_us[0]),
        "100.0%" if d.kernel_us[1] != d.kernel_us[0] else "",
        "",
        style="bold",
    )
    if d.idle_us is not None:
        t.add_row(
            "(idle)", "", "", _ms(d.idle_us[0]), _ms(d.idle_us[1]), _signed_ms(d.idle_us[1] - d.idle_us[0]), "", ""
        )
    console.print(t)
