"""The tables behind the figures and the cross-workload summary.

Every number a plot or `headroom report` shows comes from a function here, so tests can
check it: category fractions per workload (the addressable-fraction figure),
projected step times (the projection chart), addressable fraction against parameter
count (the scaling chart, :mod:`headroom.report.scaling`) and the summary table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.report.report_columns import SUMMARY_COLUMNS
from headroom.trace.analysis import Analysis
from headroom.trace.analysis_result import partial_layers, trace_label
from headroom.trace.analysis_terms import label_batches, run_model
from headroom.trace.classify import category_group

if TYPE_CHECKING:  # annotations only
    from headroom.projection.project import ProjectResult


def summary_frame(analyses: Sequence[Analysis]) -> pd.DataFrame:
    """One row per trace: the cross-workload table of `headroom report` (times in microseconds per step;
    `summary_row`), runs of one model at several batch sizes labelled with their batch."""
    models = [run_model(a.manifest) for a in analyses]
    df = pd.DataFrame(label_batches([summary_row(a) for a in analyses], models), columns=SUMMARY_COLUMNS)
    for c in _OPTIONAL_NUMBERS:
        df[c] = df[c].astype(float)  # (None: NaN)
    return df


# The row's numbers that a trace may lack (null in JSON, NaN in the frame).
_OPTIONAL_NUMBERS = ("unprofiled_step_us", "unprofiled_idle_fraction")


def summary_row(a: Analysis) -> dict[str, Any]:
    """A trace's row of `headroom report` (SUMMARY_COLUMNS; times in microseconds per step).

    A run that built only some of its blocks (`--layers`) is extrapolated to all of them
    (step time, idle, GEMM+attention+conv and addressable shares) and labelled so.
    """
    from headroom.trace.layers import extrapolate_layers

    cats = a.categories.set_index("name")["fraction"] if len(a.categories) else pd.Series(dtype=float)
    core = float(sum(cats.get(c, 0.0) for c in category_group("vendor")))
    addr_ops = a.ops[a.ops["addressable_us"] > 0].sort_values("addressable_us", ascending=False)
    top = addr_ops.iloc[0] if len(addr_ops) else None
    m = a.manifest
    step_us, idle, addressable = a.step_us, a.idle_fraction, a.addressable_fraction
    unprof_us = a.unprofiled_step_us
    unprof_idle = a.unprofiled_idle_fraction
    part = partial_layers(m)
    timed_ms = a.unprofiled_step_us / 1000 if a.unprofiled_step_us is not None else None
    ext = extrapolate_layers(a, *part, timed_step_ms=timed_ms) if part else None
    if ext is not None:
        ec = ext.categories.set_index("name")["fraction"]
        step_us, idle, addressable = ext.step_us_extrapolated, ext.idle_fraction, ext.addressable_fraction
        core = float(sum(ec.get(c, 0.0) for c in category_group("vendor")))
        # The unprofiled step of all the blocks: the estimate `headroom profile` prints (the measured
        # one scaled as the profiled step is). Its idle share is not estimated: the profiler's cost is
        # CPU time, which need not scale with the blocks as GPU time does.
        unprof_us = 1000.0 * ext.timed_step_ms_extrapolated if ext.timed_step_ms_extrapolated else None
        unprof_idle = None
    return {
        "workload": trace_label(a, extrapolated=ext is not None),
        "trace": a.source,
        "mode": a.mode,
        "device": a.device_name,
        "basis": a.basis,
        "num_steps": a.num_steps,
        "step_us": step_us,
        "gpu_us_per_step": a.total_us / max(a.num_steps, 1),
        "idle_fraction": idle,
        # Without the profiler (the manifest's timed steps), where recorded: None otherwise.
        "unprofiled_step_us": unprof_us,
        "unprofiled_idle_fraction": unprof_idle,
        "gemm_attention_conv_fraction": core,
        "addressable_fraction": addressable,
        "top_addressable_op": top["op"] if top is not None else "",
        "top_addressable_op_fraction": float(top["addressable_us"]) / a.total_us
        if top is not None and a.total_us
        else 0.0,
        "layers": f"{part[0]} of {part[1]}" if part else "",
        "extrapolated": ext is not None,
        "dtype": m.get("dtype", ""),
        "batch": m.get("batch", ""),
    }


def summary_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The summary table as JSON-ready rows (`headroom report --json`)."""
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()} for row in df.to_dict("records")]


def _label(a: Analysis, label: str | None) -> str:
    return label or trace_label(a)


def category_fractions(
    analyses: Sequence[Analysis], labels: Sequence[str] | None = None, basis: str = "kernel"
) -> pd.DataFrame:
    """One row per (workload, category): the category's fraction, for the addressable-fraction figure.

    ``basis="kernel"``: fractions of kernel time (``Analysis.total_us``; their
    addressable sum is ``Analysis.addressable_fraction``). ``basis="wall"``:
    fractions of the window (busy-time shares, plus an ``idle`` row).
    Columns: workload, category, addressable, us, fraction, stack (the category's place in the
    stacking order, 0 first); every workload's rows in one
    order (non-addressable categories, then addressable ones, each by its share over all
    workloads, idle last), the order the bars stack in.
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
                rows.append(
                    (label, r.name, bool(r.addressable), float(r.us), float(r.us) / denom if denom > 0 else 0.0)
                )
        else:
            denom = float(a.wall_us) * a.n_devices
            for r in cats.itertuples(index=False):
                rows.append(
                    (
                        label,
                        r.name,
                        bool(r.addressable),
                        float(r.wall_us),
                        float(r.wall_us) / denom if denom > 0 else 0.0,
                    )
                )
            rows.append((label, "idle", False, float(a.idle_us), float(a.idle_us) / denom if denom > 0 else 0.0))
    df = pd.DataFrame(rows, columns=["workload", "category", "addressable", "us", "fraction"])
    if len(df):
        # One stacking order for every bar (and the legend): vendor-library categories, then the
        # addressable ones, each by its share over all workloads; idle last.
        group = np.where(df["category"] == "idle", 2, df["addressable"].astype(int))
        weight = df.assign(_g=group).groupby(["_g", "category"])["fraction"].sum()
        rank = {cat: i for i, (_, cat) in enumerate(sorted(weight.index, key=lambda gc: (gc[0], -weight[gc], gc[1])))}
        order = {
            lab: i
            for i, lab in enumerate(
                dict.fromkeys([_label(a, labels[k] if labels else None) for k, a in enumerate(analyses)])
            )
        }
        df["_w"] = df["workload"].map(order)
        df["stack"] = df["category"].map(rank).astype(int)
        df = df.sort_values(["_w", "stack"], kind="stable").drop(columns=["_w"]).reset_index(drop=True)
    return df


def addressable_summary(
    analyses: Sequence[Analysis], labels: Sequence[str] | None = None, basis: str = "kernel"
) -> pd.DataFrame:
    """Per workload: the addressable fraction on `basis` (the label on each bar), and its share of GPU
    kernel time (`kernel_fraction`: what `report` and `classify` print), so that a figure of wall shares
    can print both and never a number that disagrees with the table beside it."""

    def addressable(b: str) -> tuple[list[str], pd.Series]:
        df = category_fractions(analyses, labels, b)
        return list(dict.fromkeys(df["workload"])), df[df["addressable"]].groupby("workload", sort=False)[
            "fraction"
        ].sum()

    names, s = addressable(basis)
    if not names:
        return pd.DataFrame(columns=["workload", "addressable_fraction", "kernel_fraction"])
    k = s if basis == "kernel" else addressable("kernel")[1]
    return pd.DataFrame(
        {
            "workload": names,
            "addressable_fraction": [float(s.get(n, 0.0)) for n in names],
            "kernel_fraction": [float(k.get(n, 0.0)) for n in names],
        }
    )


def projection_table(
    results: Sequence[ProjectResult], labels: Sequence[str] | None = None, scenario: str = "speedups"
) -> pd.DataFrame:
    """One row per workload: baseline and projected per-step time (ms) by method, for the projection chart.

    On the clock `headroom project` leads with: the unprofiled one where the unprofiled step is known
    (the manifest or --step-ms), else the profiled one (`clock`); every gain is of the row's own baseline,
    so the chart says what `project` says for the same trace."""
    rows = []
    for k, r in enumerate(results):
        label = labels[k] if labels else r.source
        steps = max(r.num_steps, 1)
        first = r.get("amdahl", scenario)
        u_base = first.unprofiled_baseline_us if first is not None and first.unprofiled is not None else None
        unprofiled = u_base is not None
        base_us = u_base if u_base is not None else r.baseline_us
        row = {
            "workload": label,
            "clock": "unprofiled" if unprofiled else "profiled",
            "baseline_ms": base_us / steps / 1e3,
        }

        def on_clock(p) -> float:
            if p is None:
                return np.nan
            u = p.unprofiled if unprofiled else None
            return (u.projected_us if u else np.nan) if unprofiled else p.projected_us

        for method in ("amdahl", "replay"):
            proj = on_clock(r.get(method, scenario))
            row[f"{method}_ms"] = proj / steps / 1e3
            row[f"{method}_gain"] = 1.0 - proj / base_us if base_us > 0 and np.isfinite(proj) else np.nan
            row[f"{method}_zero_ms"] = on_clock(r.get(method, "zero_time")) / steps / 1e3
        rows.append(row)
    return pd.DataFrame(
        rows,
        columns=[
            "workload",
            "clock",
            "baseline_ms",
            "amdahl_ms",
            "amdahl_gain",
            "amdahl_zero_ms",
            "replay_ms",
            "replay_gain",
            "replay_zero_ms",
        ],
    )
