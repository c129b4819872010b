"""`headroom coverage` on screen: one row per problem and trace it matches, then the problems none matches."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from headroom.projection.coverage import Coverage
from headroom.report.render import short_name

_OF = {"gpu": "GPU time", "cpu-ops": "CPU op time"}


def render_coverage(c: Coverage, console: Console) -> None:
    t = Table(
        show_edge=False,
        header_style="bold",
        title=f"{c.suite}: problems against {len(c.traces)} trace(s)",
        title_justify="left",
    )
    for col in ("problem", "trace", "share", "of", "events", "top kernels / ops"):
        t.add_column(col, justify="right" if col in ("share", "events") else "left")
    for p in c.problems:
        if not p.matches:
            t.add_row(p.name, "-", "", "", "", "no trace exercises it")
        for i, m in enumerate(p.matches):
            top = ", ".join(short_name(n, 48) for n, _ in m.top)
            t.add_row(
                p.name if i == 0 else "",
                m.trace,
                f"{100 * m.share:.2f}%",
                _OF.get(m.mode, m.mode),
                f"{m.events:,}",
                top,
            )
    console.print(t)
    unmatched = c.unmatched
    console.print(
        f"{len(c.matched)} of {len(c.problems)} problems matched"
        + (f"; unmatched: {', '.join(unmatched)}" if unmatched else ""),
        highlight=False,
    )
