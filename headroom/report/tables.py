"""The tables behind the figures and the cross-workload summary.

Every number a plot or `headroom report` shows comes from a function here, so tests can
check it: category fractions per workload (the addressable-fraction figure),
projected step times (the projection chart), addressable fraction against parameter
count (the scaling chart, :mod:`headroom.report.scaling`) and the summary table.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.projection.project import ProjectResult
from headroom.trace.analysis import Analysis, trace_label
from headroom.trace.classify import category_group



def summary_frame(analyses: list[Analysis]) -> pd.DataFrame:
    """One row per trace: the cross-workload table of `headroom report`."""
    rows = []
    for a in analyses:
        cats = a.categories.set_index("name")["fraction"] if len(a.categories) else pd.Series(dtype=float)
        core = float(sum(cats.get(c, 0.0) for c in category_group("vendor")))
        addr_ops = a.ops[a.ops["addressable_us"] > 0].sort_values("addressable_us", ascending=False)
        top = addr_ops.iloc[0] if len(addr_ops) else None
        m = a.manifest
        rows.append({
            "workload": trace_label(a),
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


def _label(a: Analysis, label: str | None) -> str:
    return label or trace_label(a)


def category_fractions(analyses: Sequence[Analysis], labels: Sequence[str] | None = None,
                       basis: str = "kernel") -> pd.DataFrame:
    """One row per (workload, category): the category's fraction, for the addressable-fraction figure.

    ``basis="kernel"``: fractions of kernel time (``Analysis.total_us``; their
    addressable sum is ``Analysis.addressable_fraction``). ``basis="wall"``:
    fractions of the window (busy-time shares, plus an ``idle`` row).
    Columns: workload, category, addressable, us, fraction; sorted with
    non-addressable categories first, then addressable ones, largest first.
    """
    if basis not in ("kernel", "wall"):
        raise UserError(f"basis must be kernel or wall, got {basis!r}")
    rows = []
    for k, a in enumerate(analyses):
        label = _label(a, labels[k] if labels else None)
        cats = a.categories
        if basis == "kernel":
            denom = float(a.total_us)
            for r in cats.itertuples(index=False):
                rows.append((label, r.name, bool(r.addressable), float(r.us), float(r.us) / denom if denom > 0 else 0.0))
        else:
            denom = float(a.wall_us) * a.n_devices
            for r in cats.itertuples(index=False):
                rows.append((label, r.name, bool(r.addressable), float(r.wall_us),
                             float(r.wall_us) / denom if denom > 0 else 0.0))
            rows.append((label, "idle", False, float(a.idle_us), float(a.idle_us) / denom if denom > 0 else 0.0))
    df = pd.DataFrame(rows, columns=["workload", "category", "addressable", "us", "fraction"])
    if len(df):
        df["_order"] = df["addressable"].astype(int)
        df = df.sort_values(["workload", "_order", "fraction"], ascending=[True, True, False], kind="stable")
        order = {lab: i for i, lab in enumerate(dict.fromkeys(
            [_label(a, labels[k] if labels else None) for k, a in enumerate(analyses)]))}
        df["_w"] = df["workload"].map(order)
        df = df.sort_values(["_w", "_order", "fraction"], ascending=[True, True, False], kind="stable")
        df = df.drop(columns=["_order", "_w"]).reset_index(drop=True)
    return df


def addressable_summary(analyses: Sequence[Analysis], labels: Sequence[str] | None = None,
                        basis: str = "kernel") -> pd.DataFrame:
    """Per workload: the addressable fraction (the label on each bar)."""
    df = category_fractions(analyses, labels, basis)
    if len(df) == 0:
        return pd.DataFrame(columns=["workload", "addressable_fraction"])
    s = df[df["addressable"]].groupby("workload", sort=False)["fraction"].sum()
    names = list(dict.fromkeys(df["workload"]))
    return pd.DataFrame({"workload": names, "addressable_fraction": [float(s.get(n, 0.0)) for n in names]})


def projection_table(results: Sequence[ProjectResult], labels: Sequence[str] | None = None,
                     scenario: str = "speedups") -> pd.DataFrame:
    """One row per workload: baseline and projected per-step time (ms) by method, for the projection chart."""
    rows = []
    for k, r in enumerate(results):
        label = labels[k] if labels else r.source
        row = {"workload": label, "baseline_ms": r.per_step_us / 1e3}
        for method in ("amdahl", "replay"):
            p = r.get(method, scenario)
            z = r.get(method, "zero_time")
            row[f"{method}_ms"] = p.per_step_us / 1e3 if p else np.nan
            row[f"{method}_gain"] = p.gain if p else np.nan
            row[f"{method}_zero_ms"] = z.per_step_us / 1e3 if z else np.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=["workload", "baseline_ms", "amdahl_ms", "amdahl_gain", "amdahl_zero_ms",
                                       "replay_ms", "replay_gain", "replay_zero_ms"])
