"""Readable tables of a rank set: the ranks side by side, the communication split, the straggler,
and the projections and targets through the collectives. Numbers come from headroom.trace.rank_set
and headroom.projection.sync_projection; this module only arranges and prints them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from headroom.report.render import esc, say, short_name
from headroom.report.tables import summary_frame, summary_records
from headroom.trace.analysis import MODE_CPU, Analysis

if TYPE_CHECKING:  # annotations only
    from headroom.projection.sync_projection import RanksProjection
    from headroom.trace.rank_set import RankSet


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _steps(rs: RankSet) -> int:
    """The steps each rank's totals cover (ranks with different counts are a warning of rank_set)."""
    return max([int(a.num_steps) for a in rs.analyses] or [1]) or 1


def rank_projection_notes(p: RanksProjection) -> list[str]:
    """The caveats of a rank projection, for stderr: its warnings and a model that misses the measured step."""
    s = p.speedups
    notes = list(p.warnings)
    if abs(s.identity_error_us) > 1.0:
        notes.append(
            f"with no speedup the model is {s.identity_error_us:.1f} us off the measured step "
            f"(clock alignment); gains are taken against the model"
        )
    return notes


def _header(rs: RankSet, console: Console) -> None:
    world = f"world {rs.world_size}" if rs.world_size else "world size unknown"
    what = ", ".join(x for x in (world, rs.backend, rs.parallel) if x)
    unit = "CPU op self time" if rs.mode == MODE_CPU else "GPU time"
    say(console, f"[bold]{esc(rs.source)}[/bold]  {len(rs.ranks)} ranks ({esc(what)}), {unit}")
    pr = rs.per_rank.set_index("rank")
    slow = rs.slowest_rank
    n_coll = rs.collectives["key"].nunique() if len(rs.collectives) else 0
    waited = float(pr.loc[slow, "waited_for_us"]) if slow in pr.index else 0.0
    console.print(
        f"synchronised step {_ms(rs.step_us)} ms (the longest rank's); slowest rank {slow}"
        + (
            f": the others waited {_ms(waited)} ms for it at {n_coll} collective{'s' if n_coll != 1 else ''}"
            if waited > 0
            else ""
        ),
        highlight=False,
    )


def render_rank_set(rs: RankSet, console: Console) -> None:
    """`headroom classify DIR` for a directory of ranks."""
    _header(rs, console)
    t = Table(show_edge=False, header_style="bold")
    for col in ("rank", "ms/step", "busy", "idle", "compute", "comm", "overlapped", "exposed", "waited", "addressable"):
        t.add_column(col, justify="left" if col == "rank" else "right")
    for r in rs.per_rank.itertuples(index=False):
        n = max(int(r.num_steps), 1)
        t.add_row(
            str(r.rank),
            _ms(r.step_us),
            _ms(r.busy_us / n),
            _pct(r.idle_fraction),
            _ms(r.compute_busy_us / n),
            _ms(r.comm_busy_us / n),
            _ms(r.comm_overlapped_us / n),
            _ms(r.comm_exposed_us / n),
            _ms(r.wait_us / n),
            _pct(r.addressable_fraction),
        )
    console.print(t)
    console.print(
        "ms per step; comm = time any communication ran (union); overlapped = while compute ran; "
        "exposed = the rest; waited = at collectives, for the last rank to arrive",
        style="dim",
        highlight=False,
    )
    n = _steps(rs)
    c = Table(show_edge=False, header_style="bold", title="categories across ranks (ms/step)", title_justify="left")
    for col in ("category", "min", "median", "max", "median %", "most on rank", "addressable"):
        c.add_column(col, justify="left" if col in ("category", "addressable") else "right")
    for r in rs.categories.itertuples(index=False):
        c.add_row(
            r.name,
            _ms(r.min_us / n),
            _ms(r.median_us / n),
            _ms(r.max_us / n),
            _pct(r.median_fraction),
            str(r.max_rank),
            Text("yes", style="green") if r.addressable else "no",
        )
    console.print(c)


def rank_summary_frame(rs: RankSet) -> pd.DataFrame:
    """`headroom report DIR` for a rank set: the one-row-per-trace summary, one row per rank, plus
    the communication split and waits."""
    df = summary_frame(rs.analyses)
    pr = rs.per_rank.reset_index(drop=True)
    wall = pr["wall_us"].where(pr["wall_us"] > 0, 1.0)
    df.insert(0, "rank", pr["rank"].to_numpy())
    df["comm_fraction"] = (pr["comm_busy_us"] / wall).to_numpy()
    df["comm_exposed_fraction"] = (pr["comm_exposed_us"] / wall).to_numpy()
    df["wait_us"] = pr["wait_us"].to_numpy(dtype=float)  # over the analysed window, like the comm times
    return df


def render_rank_summary(rs: RankSet, df: pd.DataFrame, console: Console) -> None:
    _header(rs, console)
    t = Table(show_edge=False, header_style="bold")
    for col in (
        "rank",
        "workload",
        "ms/step",
        "idle",
        "comm",
        "exposed",
        "waited ms/step",
        "addressable",
        "top addressable op",
        "share",
    ):
        t.add_column(col, justify="left" if col in ("rank", "workload", "top addressable op") else "right")
    for r in df.itertuples(index=False):
        top = short_name(r.top_addressable_op, 68) if r.top_addressable_op else ""
        t.add_row(
            str(r.rank),
            r.workload,
            _ms(r.step_us),
            _pct(r.idle_fraction),
            _pct(r.comm_fraction),
            _pct(r.comm_exposed_fraction),
            _ms(r.wait_us / max(int(r.num_steps), 1)),
            _pct(r.addressable_fraction),
            top,
            _pct(r.top_addressable_op_fraction) if top else "",
        )
    console.print(t)


def render_rank_projection(p: RanksProjection, console: Console) -> None:
    s, z = p.speedups, p.zero_time
    on = (
        "every rank"
        if p.on_ranks == p.ranks
        else "rank" + ("s " if len(p.on_ranks) > 1 else " ") + ", ".join(map(str, p.on_ranks))
    )
    say(console, f"[bold]{esc(p.source)}[/bold]  {len(p.ranks)} ranks, speedups on {on}")
    say(
        console,
        f"synchronised step {_ms(s.baseline_us / s.num_steps)} ms -> {_ms(s.projected_us / s.num_steps)} ms "
        f"([bold]{_pct(s.gain)}[/bold] faster); selected kernels at zero time: {_pct(z.gain)}",
        highlight=False,
    )
    t = Table(show_edge=False, header_style="bold")
    for col in ("rank", "measured ms/step", "through the collectives", "alone (Amdahl)"):
        t.add_column(col, justify="left" if col == "rank" else "right")
    for r, (measured, projected) in s.per_rank.items():
        alone = p.per_rank_amdahl.get(r)
        t.add_row(
            str(r),
            _ms(measured / s.num_steps),
            _ms(projected / s.num_steps),
            f"{_ms(alone['projected_us'] / s.num_steps)} ({_pct(alone['gain'])})" if alone else "unchanged",
        )
    console.print(t)
    console.print(
        "alone: each rank projected on its own, as a one-rank analysis would; the step ends when the "
        "slowest rank reaches each collective",
        style="dim",
        highlight=False,
    )


def render_sync_targets(rs: RankSet, table: pd.DataFrame, speedup: float, console: Console) -> None:
    say(
        console,
        f"[bold]{esc(rs.source)}[/bold]  {len(rs.ranks)} ranks: which op, {speedup:g}x faster on every rank, "
        f"shortens the synchronised step ({_ms(rs.step_us)} ms) most",
    )
    n = _steps(rs)
    for kind, part in table.groupby("kind", sort=False):
        t = Table(show_edge=False, header_style="bold", title=f"by {kind}", title_justify="left")
        for col in (
            "name",
            "category",
            "ms/step (all ranks)",
            "min..max rank ms/step",
            "gain",
            "at zero time",
            "one-rank gain",
        ):
            t.add_column(col, justify="left" if col in ("name", "category") else "right")
        for r in part.itertuples(index=False):
            t.add_row(
                short_name(str(r.name), 70),
                r.category,
                _ms(r.us / n),
                f"{_ms(r.min_rank_us / n)}..{_ms(r.max_rank_us / n)}",
                _pct(r.gain),
                _pct(r.gain_inf),
                _pct(r.rank_gain_median),
            )
        console.print(t)
    console.print(
        "one-rank gain: what each rank's own Amdahl promises (median over ranks)", style="dim", highlight=False
    )


def report_body(
    analyses: Sequence[Analysis], rank_sets: Sequence[RankSet], failed: Sequence[str] = ()
) -> dict[str, Any]:
    """The `headroom report --json` document of these analyses (summary.report_document)."""
    from headroom.report.summary import report_document

    return report_document(
        summary_records(summary_frame(list(analyses))), [rank_set_record(rs) for rs in rank_sets], failed
    )


def rank_set_record(rs: RankSet) -> dict[str, Any]:
    """A directory of ranks in the `headroom report --json` document: its step and its ranks' rows."""
    return {
        "source": rs.source,
        "kind": "ranks",
        "step_us": rs.step_us,
        "slowest_rank": rs.slowest_rank,
        "ranks": summary_records(rank_summary_frame(rs)),
    }
