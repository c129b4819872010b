"""Targets across ranks: which op, made faster on every rank that runs it, shortens the synchronised
step most (each candidate projected through the collectives, headroom.projection.sync_projection)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.projection.amdahl import amdahl
from headroom.projection.sync_projection import SyncModel, sync_projection
from headroom.projection.targets import NO_OP
from headroom.trace.rank_set import RankSet

_RANK_TARGET_COLUMNS = [
    "kind",
    "name",
    "category",
    "kernels",
    "us",
    "share",
    "min_rank_us",
    "max_rank_us",
    "gain",
    "gain_inf",
    "rank_gain_median",
]


def _keys(events: pd.DataFrame, kind: str) -> np.ndarray:
    if kind in ("op", "top_op"):
        v = events[kind].astype(str)
        return v.where(v != "", NO_OP).to_numpy(dtype=object)
    if kind in ("module", "module_path"):
        # the innermost module of each kernel: its class (module) or its path (module_path), as one rank's targets
        col = "module_type" if kind == "module" else "module"
        if col not in events.columns:
            return np.full(len(events), "", dtype=object)
        return events[col].astype(str).to_numpy(dtype=object)
    if kind == "kernel":
        return events["name"].astype(str).to_numpy(dtype=object)
    raise UserError(f"unknown grouping {kind!r} (op, top_op, module, module_path, kernel)")


def sync_targets(
    rs: RankSet,
    speedup: float = 1.5,
    by: Sequence[str] = ("op", "module"),
    top: int | None = 20,
    candidates: int | None = None,
    model: SyncModel | None = None,
) -> pd.DataFrame:
    """Ops (and module class paths) ranked by their effect on the synchronised step.

    Each group is made `speedup` times faster on every rank that runs it and projected
    through the collectives (`gain`, and `gain_inf` for zero time); `rank_gain_median`
    is what a one-rank analysis would promise (each rank's own Amdahl gain, the median).
    Communication itself is not a target. The `candidates` groups with the most time
    (default 3 x top) are projected.
    """
    if not (isinstance(speedup, (int, float)) and math.isfinite(speedup) and speedup > 0):
        raise UserError(f"--speedup must be a finite number > 0, got {speedup!r}")
    model = model or SyncModel.from_rank_set(rs)
    frames = []
    total = sum(float(a.events["dur"].sum()) for a in rs.analyses)
    for kind in by:
        per_rank_keys = {r: _keys(a.events, kind) for r, a in zip(rs.ranks, rs.analyses)}
        rows = []
        for r, a in zip(rs.ranks, rs.analyses):
            ev = a.events
            k = per_rank_keys[r]
            comm = ev["category"].astype(str).to_numpy() == "communication"
            ok = (k != "") & ~comm
            rows.append(
                pd.DataFrame(
                    {
                        "key": k[ok],
                        "rank": r,
                        "dur": ev["dur"].to_numpy(dtype=float)[ok],
                        "category": ev["category"].astype(str).to_numpy()[ok],
                    }
                )
            )
        allrows = (
            pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["key", "rank", "dur", "category"])
        )
        if len(allrows) == 0:
            continue
        g = allrows.groupby("key", sort=False).agg(us=("dur", "sum"), kernels=("dur", "size"))
        per = allrows.groupby(["key", "rank"], sort=False)["dur"].sum().unstack("rank", fill_value=0.0)
        for r in rs.ranks:
            if r not in per.columns:
                per[r] = 0.0
        g["min_rank_us"] = per[rs.ranks].min(axis=1)
        g["max_rank_us"] = per[rs.ranks].max(axis=1)
        cat = (
            allrows.groupby(["key", "category"], sort=False)["dur"]
            .sum()
            .reset_index()
            .sort_values("dur", ascending=False, kind="stable")
            .drop_duplicates("key")
            .set_index("key")["category"]
        )
        g = g.join(cat)
        n = candidates if candidates is not None else (3 * top if top else len(g))
        g = g.sort_values(["us"], ascending=False, kind="stable").head(n)
        gains, gains_inf, rank_med = [], [], []
        for key in g.index:
            fs, finf, rg = {}, {}, []
            for r, a in zip(rs.ranks, rs.analyses):
                hit = per_rank_keys[r] == key
                fs[r] = np.where(hit, float(speedup), 1.0)
                finf[r] = np.where(hit, np.inf, 1.0)
                rg.append(amdahl(a, fs[r]).gain if hit.any() else 0.0)
            gains.append(sync_projection(model, fs).gain)
            gains_inf.append(sync_projection(model, finf).gain)
            rank_med.append(float(np.median(rg)))
        g["gain"], g["gain_inf"], g["rank_gain_median"] = gains, gains_inf, rank_med
        g["kind"] = kind
        g["name"] = g.index.astype(str)
        g["share"] = g["us"] / total if total > 0 else 0.0
        g = g.sort_values(["gain", "us"], ascending=False, kind="stable").reset_index(drop=True)
        if top:
            g = g.head(top)
        frames.append(g[_RANK_TARGET_COLUMNS])
    if not frames:
        return pd.DataFrame(columns=_RANK_TARGET_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def sync_targets_dict(rs: RankSet, table: pd.DataFrame, speedup: float) -> dict[str, Any]:
    """The ``headroom targets --json`` contract for a rank set (docs/distributed.md)."""

    def clean(v):
        if isinstance(v, (np.floating, float)):
            return float(v) if math.isfinite(float(v)) else None
        if isinstance(v, np.integer):
            return int(v)
        return v

    return {
        "source": rs.source,
        "kind": "ranks",
        "ranks": rs.ranks,
        "speedup": speedup,
        "step_us": rs.step_us,
        "slowest_rank": rs.slowest_rank,
        "targets": [{c: clean(v) for c, v in row.items()} for row in table.to_dict(orient="records")],
    }
