"""Readable tables of projections (rich): `headroom project`'s estimate, entries and scenarios, and `headroom
targets`' tables.

Numbers come from `ProjectResult` and the targets table; this module only arranges and prints them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pandas as pd
from rich.console import Console
from rich.table import Table

from headroom.jsonio import plain
from headroom.report.render import Justify, count_per_step, esc, say, short_name, steps_phrase

if TYPE_CHECKING:  # annotations only: printing a projection imports no projector
    from headroom.projection.project import ProjectResult
    from headroom.trace.analysis import Analysis


def _pct2(x: float) -> str:
    return f"{100 * x:.2f}%"


def render_projection(res: ProjectResult, console: Console) -> None:
    """`headroom project`: the estimate, the measured breakdown, the speedup entries, the projections, the warnings."""
    from headroom.projection.overhead import cpu_clock

    say(console, f"[bold]{esc(res.source)}[/bold]")
    e = res.estimate
    if e is not None:
        # The two times the ratio is of, beside it (e.speedup is baseline_us / projected_us).
        say(
            console,
            f"[bold]estimate ({esc(e.scenario)}): {e.speedup:.3f}x end-to-end[/bold], between {e.low:.3f}x "
            f"and {e.high:.3f}x   {e.baseline_us / max(res.num_steps, 1) / 1e3:,.3f} -> "
            f"{e.projected_us / max(res.num_steps, 1) / 1e3:,.3f} ms/step ({e.clock} clock)",
            highlight=False,
        )
        console.print(f"  {e.method}", highlight=False)
    b = plain(res.baseline)
    n = max(res.num_steps, 1)
    console.print(
        f"measured: {res.per_step_us / 1e3:,.3f} ms/step ({res.num_steps} step(s), {res.baseline_us / 1e3:,.3f} ms in total)   "
        f"kernels {_pct2(b['kernel_fraction'])}  memory {_pct2(b['memory_fraction'])}  "
        f"communication {_pct2(b['communication_fraction'])}  idle {_pct2(b['idle_fraction'])}",
        highlight=False,
    )
    u = res.unprofiled
    if u is not None:
        busy = (1.0 - b["idle_fraction"]) * res.baseline_us
        idle_u = max(0.0, 1.0 - busy / (u.step_us * max(res.num_steps, 1))) if u.step_us > 0 else 0.0
        how = "not corrected" if u.cpu_scale == 1.0 else f"the replay runs with {cpu_clock(u.cpu_scale)}"
        if abs(u.window_scale - 1.0) >= 5e-5:
            how += f", replayed times x{u.window_scale:.4f} to it"
        console.print(
            f"unprofiled: {u.step_us / 1e3:,.3f} ms/step ({u.source}; profiled {100 * u.overhead:+.0f}%), "
            f"idle {_pct2(idle_u)}; {how}",
            highlight=False,
        )
    if res.entries:
        console.print(_entries_table(res, n))
    if res.distribution:
        d = res.distribution
        extra = ""
        if "n" in d:
            extra = f"  ({d['n']} results from {d.get('source', '')})"
        say(
            console,
            f"distribution scenarios over [bold]{esc(d['select'])}[/bold] "
            f"({d['selected_us'] / n / 1e3:,.3f} ms/step of kernels){extra}",
            highlight=False,
        )
    console.print(_projections_table(res))
    console.print()


def _entries_table(res: ProjectResult, n: int) -> Table:
    """The speedup entries: what each selects, per step, and the CPU side of launch-aware entries."""
    t = Table(show_edge=False, header_style="bold", title="speedups", title_justify="left")
    show_source = any(e.source != "command line" for e in res.entries)
    cols: list[tuple[str, Justify]] = [
        ("selector", "left"),
        ("factor", "right"),
        ("verified", "left"),
        ("kernels/step", "right"),
        ("ms/step", "right"),
        ("applied ms/step", "right"),
        ("addressable", "right"),
        ("top kernel", "left"),
    ]
    show_cpu = any(e.cpu for e in res.entries)
    if show_cpu:
        cols[2:2] = [("launches", "right"), ("calls/step", "right"), ("CPU ms/step saved", "right")]
    if show_source:
        cols.append(("source", "left"))
    for c, j in cols:
        t.add_column(
            c,
            justify=j,
            no_wrap=c != "selector",
            overflow="fold" if c == "selector" else "ellipsis",
            min_width=24 if c == "selector" else None,
            max_width=36 if c in ("top kernel", "source") else None,
        )
    for ent in res.entries:
        top = short_name(ent.top_kernels[0].name, 36) if ent.top_kernels else ""
        addr = f"{100 * ent.addressable_us / ent.us:.0f}%" if ent.us > 0 else "-"
        row = [
            ent.selector,
            f"{ent.speedup:g}",
            {True: "yes", False: "no", None: ""}[ent.verified],
            count_per_step(ent.kernels / n),
            f"{ent.us / n / 1e3:,.3f}",
            f"{ent.applied_us / n / 1e3:,.3f}",
            addr,
            top,
        ]
        if show_cpu:
            cpu = ent.cpu or {}
            saved = (
                ""
                if "removed_cpu_us" not in cpu
                else f"{(cpu['removed_cpu_us'] - cpu.get('added_cpu_us', 0.0)) / n / 1e3:,.3f}"
            )
            row[2:2] = [
                "" if ent.launches is None else f"{cpu.get('kernels_per_call', 0):g} -> {ent.launches}",
                f"{cpu['calls_per_step']:,.4g}" if cpu else "",
                saved,
            ]
        if show_source:
            row.append(ent.source)
        t.add_row(*row)
    return t


def _projections_table(res: ProjectResult) -> Table:
    """Every scenario by every method: the projected step, the gain, and how the projected window divides."""
    u = res.unprofiled
    t = Table(show_edge=False, header_style="bold", title="projections", title_justify="left")
    proj_cols: list[tuple[str, Justify]] = [
        ("scenario", "left"),
        ("method", "left"),
        ("factor", "right"),
        ("ms/step", "right"),
        ("saved", "right"),
        ("end-to-end", "right"),
        ("kernels", "right"),
        ("mem+comm", "right"),
        ("idle", "right"),
    ]
    if u is not None:
        proj_cols[6:6] = [("unprofiled ms/step", "right"), ("unprofiled", "right")]
    for c, j in proj_cols:
        t.add_column(c, justify=j)
    for p in res.projections:
        bd = plain(p.breakdown)
        fac = "" if p.factor is None else ("inf" if not math.isfinite(p.factor) else f"{p.factor:.4g}")
        row = [
            p.scenario,
            p.method,
            fac,
            f"{p.per_step_us / 1e3:,.3f}",
            _pct2(p.gain),
            f"{p.speedup:.4f}x",
            _pct2(bd["kernel_fraction"]),
            _pct2(bd["memory_fraction"] + bd["communication_fraction"]),
            _pct2(bd["idle_fraction"]),
        ]
        if u is not None:
            pu = p.unprofiled
            row[6:6] = [f"{pu.per_step_us / 1e3:,.3f}", f"{pu.speedup:.4f}x"] if pu else ["", ""]
        t.add_row(*row)
    return t


def _mix(categories: dict, n: int = 2) -> str:
    top = sorted(categories.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{c} {100 * f:.0f}%" for c, f in top)


def _inputs(seen: list) -> str:
    if not seen:
        return ""
    more = f" (+{len(seen) - 1})" if len(seen) > 1 else ""
    return f"{seen[0]['inputs']}{more}"


def _num(x: float, fmt: str) -> str:
    return "" if x is None or not math.isfinite(x) else format(x, fmt)


def render_targets(a: Analysis, table: pd.DataFrame, speedup: float, console: Console) -> None:
    """`headroom targets`: one table per grouping (op, module, ...), ranked by end-to-end gain."""
    n = max(a.num_steps, 1)
    say(
        console,
        f"[bold]{esc(a.source)}[/bold]  measured {a.step_us / 1e3:,.3f} ms/step over {steps_phrase(a.basis, a.num_steps)}",
        highlight=False,
    )
    has_replay = "replay_gain" in table.columns
    for kind in dict.fromkeys(table["kind"]):
        rows = table[table["kind"] == kind]
        module = kind in ("module", "module_path")
        title = f"by {kind}" + (f" ({rows['scope'].iat[0]} time)" if module and len(rows) else "")
        t = Table(show_edge=False, header_style="bold", title=title, title_justify="left")
        cols: list[tuple[str, Justify]]
        if module:
            cols = [
                ("name", "left"),
                ("calls/step", "right"),
                ("kernels/call", "right"),
                ("CPU µs/call", "right"),
                ("ms/step", "right"),
                ("share", "right"),
                ("categories", "left"),
            ]
        else:
            cols = [
                ("name", "left"),
                ("category", "left"),
                ("addressable", "left"),
                ("kernels/step", "right"),
                ("ms/step", "right"),
                ("share", "right"),
            ]
        cols += [(f"gain @{speedup:g}x", "right"), ("gain @inf", "right")]
        if has_replay:
            cols += [(f"replay @{speedup:g}x", "right"), ("replay @inf", "right")]
        if module:
            cols += [("inputs", "left")]
        for c, j in cols:
            t.add_column(c, justify=j)
        for r in rows.itertuples(index=False):
            if module:
                row = [
                    short_name(r.name, 70),
                    _num(r.calls, ",.4g"),
                    _num(r.kernels_per_call, ",.1f"),
                    _num(r.cpu_us_per_call, ",.1f"),
                    f"{r.us / n / 1e3:,.3f}",
                    _pct2(r.share),
                    _mix(r.categories),
                ]
            else:
                row = [
                    short_name(r.name, 70),
                    r.category,
                    r.addressable,
                    count_per_step(r.kernels / n),
                    f"{r.us / n / 1e3:,.3f}",
                    _pct2(r.share),
                ]
            row += [_pct2(r.gain), _pct2(r.gain_inf)]
            if has_replay:
                row += [
                    "" if not math.isfinite(r.replay_gain) else _pct2(r.replay_gain),
                    "" if not math.isfinite(r.replay_gain_inf) else _pct2(r.replay_gain_inf),
                ]
            if module:
                row += [_inputs(r.inputs)[:60]]
            t.add_row(*row)
        console.print(t)
    console.print("gain: fraction of the measured window saved (Amdahl; replay where shown)")
