"""Which op (or module) to make faster: ranked by the end-to-end gain it would give."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.projection.baseline import Baseline, as_baseline
from headroom.projection.replay import replay_projection
from headroom.trace.analysis import Analysis

DEFAULT_SPEEDUP = 1.5
NO_OP = "(no op)"
_TARGET_COLUMNS = ["kind", "name", "category", "addressable", "addressable_fraction", "kernels", "us", "share",
                   "wall_us", "gain", "gain_inf", "projected_us", "projected_inf_us"]


def module_class_path(path: str) -> str:
    """``Model_0.Layer_5.MLP_5.Linear_20`` -> ``Model.Layer.MLP.Linear``; digits-only parts -> ``*``.

    Groups the same module across layers, which is what one kernel replaces.
    """
    if not path:
        return ""
    parts = []
    for p in path.split("."):
        if p.isdigit():
            parts.append("*")
        else:
            parts.append(re.sub(r"_\d+$", "", p))
    return ".".join(parts)


def _amdahl_groups(b: Baseline, keys: np.ndarray, s: float) -> pd.DataFrame:
    """Amdahl per group at speedup s and at infinity (vectorised; per device, slowest device wins)."""
    ev = b.events
    wall = ev["wall_us"].to_numpy(dtype=float)
    dev = ev["device"].to_numpy() if "device" in ev.columns else np.zeros(len(ev))
    g = pd.DataFrame({"key": keys, "dev": dev, "wall": wall}).groupby(["key", "dev"], sort=False)["wall"].sum()
    g = g.unstack("dev", fill_value=0.0)
    # One device: T - t(1 - 1/s). Several: the window shrinks by the smallest per-device saving.
    if g.shape[1] == 1:
        t = g.iloc[:, 0]
    else:
        t = g.min(axis=1)
    out = pd.DataFrame({"wall_us": g.sum(axis=1)})
    out["projected_us"] = b.wall_us - t * (1.0 - 1.0 / s)
    out["projected_inf_us"] = b.wall_us - t
    return out


def targets(analysis: Analysis | Baseline, speedup: float = DEFAULT_SPEEDUP, by: Sequence[str] = ("op", "module"),
            top: int | None = 20, replay_top: int = 0) -> pd.DataFrame:
    """Ops (and nn.Module class paths, where the trace has them) ranked by end-to-end gain.

    Columns: kind (op|module), name, category (the one with most of its time),
    addressable (yes|no|partly), addressable_fraction, kernels, us (kernel time),
    share (of all kernel time), wall_us (busy-time share), gain and gain_inf (fraction
    of the measured window saved at `speedup` and at infinite speedup, Amdahl),
    projected_us, projected_inf_us; with ``replay_top=N`` also replay_gain and
    replay_gain_inf for the first N rows of each kind.
    """
    if not (isinstance(speedup, (int, float)) and math.isfinite(speedup) and speedup > 0):
        raise UserError(f"--speedup must be a finite number > 0, got {speedup!r}")
    b = as_baseline(analysis)
    ev = b.events
    total = float(ev["dur"].sum())
    frames = []
    for grouping in by:
        if grouping == "op":
            keys = ev["op"].astype(str).where(ev["op"].astype(str) != "", NO_OP).to_numpy(dtype=object)
        elif grouping == "top_op":
            keys = ev["top_op"].astype(str).where(ev["top_op"].astype(str) != "", NO_OP).to_numpy(dtype=object)
        elif grouping == "module":
            if "module" not in ev.columns or not (ev["module"].astype(str) != "").any():
                continue
            keys = ev["module"].astype(str).map(module_class_path).to_numpy(dtype=object)
        elif grouping == "kernel":
            keys = ev["name"].astype(str).to_numpy(dtype=object)
        else:
            raise UserError(f"unknown grouping {grouping!r} (op, top_op, module, kernel)")
        valid = keys != ""
        sub = ev.loc[valid]
        k = keys[valid]
        if len(sub) == 0:
            continue
        dur = sub["dur"].to_numpy(dtype=float)
        addr = sub["addressable"].fillna(False).to_numpy(dtype=bool)
        agg = pd.DataFrame({"key": k, "dur": dur, "addr": np.where(addr, dur, 0.0)}).groupby("key", sort=False).agg(
            us=("dur", "sum"), kernels=("dur", "size"), addressable_us=("addr", "sum"))
        cat = (pd.DataFrame({"key": k, "category": sub["category"].astype(str).to_numpy(), "dur": dur})
               .groupby(["key", "category"], sort=False)["dur"].sum().reset_index()
               .sort_values("dur", ascending=False, kind="stable").drop_duplicates("key").set_index("key")["category"])
        am = _amdahl_groups(Baseline(sub.reset_index(drop=True), b.wall_us, b.window, b.num_steps, b.n_devices),
                            k, speedup)
        t = agg.join(am).join(cat.rename("category"))
        t["kind"] = grouping
        t["name"] = t.index.astype(str)
        t["share"] = t["us"] / total if total > 0 else 0.0
        frac = np.where(t["us"] > 0, t["addressable_us"] / t["us"].where(t["us"] > 0, 1.0), 0.0)
        t["addressable_fraction"] = frac
        t["addressable"] = np.where(frac >= 0.999, "yes", np.where(frac <= 0.001, "no", "partly"))
        t["gain"] = 1.0 - t["projected_us"] / b.wall_us if b.wall_us > 0 else 0.0
        t["gain_inf"] = 1.0 - t["projected_inf_us"] / b.wall_us if b.wall_us > 0 else 0.0
        t = t.sort_values(["gain", "us"], ascending=False, kind="stable").reset_index(drop=True)
        if top:
            t = t.head(top)
        t = t[_TARGET_COLUMNS].copy()
        if replay_top > 0 and b.mode == "gpu":
            rg = np.full(len(t), np.nan)
            rgi = np.full(len(t), np.nan)
            for row in range(min(replay_top, len(t))):
                mask = valid.copy()
                mask[valid] = k == t["name"].iat[row]
                rg[row] = replay_projection(b, speedup, mask).gain
                rgi[row] = replay_projection(b, math.inf, mask).gain
            t["replay_gain"] = rg
            t["replay_gain_inf"] = rgi
        frames.append(t)
    if not frames:
        return pd.DataFrame(columns=_TARGET_COLUMNS)
    return pd.concat(frames, ignore_index=True)


@dataclass
class Targets:
    """Ops (and modules) ranked by the end-to-end gain a faster kernel for each would give."""

    baseline: Baseline
    speedup: float
    table: pd.DataFrame

    def to_frame(self) -> pd.DataFrame:
        """The ranking (columns as `targets()` documents them)."""
        return self.table.copy()

    def to_dict(self) -> dict[str, Any]:
        """The ``headroom targets --json`` contract."""
        return targets_dict(self.baseline, self.table, self.speedup)


def rank_targets(analysis: Analysis | Baseline, speedup: float = DEFAULT_SPEEDUP, by: Sequence[str] = ("op", "module"),
                 top: int | None = 20, replay_top: int = 0) -> Targets:
    """`targets()` as a result object."""
    b = as_baseline(analysis)
    return Targets(b, speedup, targets(b, speedup, by, top, replay_top))


def targets_dict(analysis: Analysis | Baseline, table: pd.DataFrame, speedup: float) -> dict[str, Any]:
    """The ``headroom targets --json`` contract (docs/projection.md)."""
    b = as_baseline(analysis)

    def clean(v):
        if isinstance(v, (np.floating, float)):
            return None if not math.isfinite(float(v)) else float(v)
        if isinstance(v, np.integer):
            return int(v)
        return v

    return {
        "trace": b.source, "mode": b.mode, "baseline_us": b.wall_us, "per_step_us": b.per_step_us,
        "num_steps": b.num_steps, "speedup": speedup,
        "targets": [{c: clean(v) for c, v in row.items()} for row in table.to_dict(orient="records")],
    }
