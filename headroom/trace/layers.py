"""Layer extrapolation: scale the per-block work of a run that built N of L identical blocks to all L.

`headroom profile --layers N` marks each block's forward (and backward) with a
`headroom/block ...` range; this analysis of `Analysis.events` splits kernel time
into per-block and once-per-step work and scales the per-block part by L/N.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from headroom.trace.analysis import Analysis
from headroom.trace.attribute import containing_range
from headroom.trace.ranges import BLOCK_RANGE_PREFIX


@dataclass
class LayerExtrapolation:
    """Category times with per-block work scaled from `built` to `total` blocks.

    Per-step microseconds. `categories` rows: name, addressable, measured_us,
    block_us (of measured_us), us (extrapolated), fraction (extrapolated, of
    extrapolated total), measured_fraction.
    """

    built: int = field(metadata={"json_key": "built_layers"})
    total: int = field(metadata={"json_key": "total_layers"})
    block_ranges: int
    step_us: float
    step_us_extrapolated: float
    block_span_us: float
    total_us: float
    total_us_extrapolated: float
    block_us: float
    addressable_fraction: float
    addressable_fraction_measured: float
    idle_fraction: float
    categories: pd.DataFrame
    timed_step_ms_extrapolated: float | None = None

    # `headroom profile --json`'s `layers`: the computed factor and block share among the fields.
    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "built",
        "total",
        "factor",
        "block_ranges",
        "block_share",
        "step_us",
        "step_us_extrapolated",
        "timed_step_ms_extrapolated",
        "block_span_us",
        "total_us",
        "total_us_extrapolated",
        "addressable_fraction",
        "addressable_fraction_measured",
        "idle_fraction",
        "categories",
    )

    @property
    def factor(self) -> float:
        return self.total / self.built

    @property
    def block_share(self) -> float:
        """Share of the measured kernel time that is inside blocks."""
        return self.block_us / self.total_us if self.total_us > 0 else 0.0

    def fractions(self) -> dict[str, float]:
        return {r.name: float(r.fraction) for r in self.categories.itertuples(index=False)}


def block_mask(events: pd.DataFrame, ranges: pd.DataFrame) -> np.ndarray:
    """Which events were launched (GPU) or ran (CPU ops) inside a block range on the same thread.

    Returns the index of the containing range per event, -1 outside every block.
    """
    out = np.full(len(events), -1, dtype=np.int64)
    if len(events) == 0 or len(ranges) == 0:
        return out
    when = events["launch_ts"].to_numpy(dtype=float) if "launch_ts" in events else events["ts"].to_numpy(dtype=float)
    when = np.where(np.isnan(when), events["ts"].to_numpy(dtype=float), when)
    ev_tid = events["launch_tid"].astype(str).to_numpy() if "launch_tid" in events else None
    r_ts = ranges["ts"].to_numpy(dtype=float)
    r_end = r_ts + ranges["dur"].to_numpy(dtype=float)
    r_tid = ranges["tid"].astype(str).to_numpy()
    for tid in np.unique(r_tid):
        r_idx = np.flatnonzero(r_tid == tid)
        p_idx = np.flatnonzero(ev_tid == tid) if ev_tid is not None else np.arange(len(events))
        if len(p_idx) == 0:
            continue
        hit = containing_range(r_ts[r_idx], r_end[r_idx], when[p_idx])
        ok = hit >= 0
        out[p_idx[ok]] = r_idx[hit[ok]]
    return out


def extrapolate_layers(
    analysis: Analysis, built: int, total: int, ranges: pd.DataFrame | None = None, timed_step_ms: float | None = None
) -> LayerExtrapolation | None:
    """Scale the per-block part of each category from `built` blocks to `total`.

    Block work is what ran inside `headroom/block ...` ranges; everything else
    (embeddings, heads, the loss, the optimizer step of non-block parameters,
    idle gaps between blocks) is counted once. Step time: the measured step plus
    (L/N - 1) times the per-step span of block work (first to last kernel of
    each block instance, idle gaps inside blocks included).
    Returns None when the trace has no block ranges.
    """
    if ranges is None:
        cpu = analysis.trace.cpu if analysis.trace is not None else pd.DataFrame()
        ranges = cpu[cpu["name"].astype(str).str.startswith(BLOCK_RANGE_PREFIX)] if len(cpu) else cpu
    if ranges is None or len(ranges) == 0:
        return None
    ev = analysis.events
    idx = block_mask(ev, ranges)
    inb = idx >= 0
    steps = max(int(analysis.num_steps), 1)
    factor = total / built

    dur = ev["dur"].to_numpy(dtype=float)
    addr = ev["addressable"].to_numpy(dtype=bool)
    cats = _categories(ev, inb, steps, factor)
    total_meas = float(cats["measured_us"].sum())
    total_ext = float(cats["us"].sum())
    span = _block_span(ev, idx, inb, steps)
    step_us = float(analysis.step_us)
    step_ext = step_us + (factor - 1.0) * span
    wall_share = ev["wall_us"].to_numpy(dtype=float) if "wall_us" in ev else dur
    busy = float(wall_share.sum()) / steps
    busy_ext = busy + (factor - 1.0) * float(wall_share[inb].sum()) / steps
    n_dev = analysis.n_devices
    idle = max(1.0 - busy_ext / (step_ext * n_dev), 0.0) if step_ext > 0 else 0.0
    addr_meas = float(dur[addr].sum()) / steps
    addr_ext = addr_meas + (factor - 1.0) * float(dur[addr & inb].sum()) / steps
    return LayerExtrapolation(
        built=built,
        total=total,
        block_ranges=int(len(np.unique(idx[inb]))) if inb.any() else 0,
        step_us=step_us,
        step_us_extrapolated=step_ext,
        block_span_us=span,
        total_us=total_meas,
        total_us_extrapolated=total_ext,
        block_us=float(cats["block_us"].sum()),
        addressable_fraction=addr_ext / total_ext if total_ext > 0 else 0.0,
        addressable_fraction_measured=addr_meas / total_meas if total_meas > 0 else 0.0,
        idle_fraction=idle,
        categories=cats,
        timed_step_ms_extrapolated=(timed_step_ms * step_ext / step_us) if (timed_step_ms and step_us > 0) else None,
    )


def _categories(ev: pd.DataFrame, inb: np.ndarray, steps: int, factor: float) -> pd.DataFrame:
    """Per category and step: the measured time, its part in blocks, and the time with the blocks scaled by
    `factor`; with each one's share, longest first."""
    dur = ev["dur"].to_numpy(dtype=float)
    cat = ev["category"].astype(str).to_numpy()
    measured = pd.Series(dur).groupby(cat).sum()
    block = pd.Series(np.where(inb, dur, 0.0)).groupby(cat).sum()
    addressable_by_cat = pd.Series(ev["addressable"].to_numpy(dtype=bool)).groupby(cat).any()
    rows = []
    for name in measured.index:
        m = float(measured[name]) / steps
        b = float(block.get(name, 0.0)) / steps
        rows.append(
            {
                "name": name,
                "addressable": bool(addressable_by_cat.get(name, False)),
                "measured_us": m,
                "block_us": b,
                "us": m + (factor - 1.0) * b,
            }
        )
    cats = pd.DataFrame(rows, columns=["name", "addressable", "measured_us", "block_us", "us"])
    total_meas = float(cats["measured_us"].sum())
    total_ext = float(cats["us"].sum())
    cats["fraction"] = cats["us"] / total_ext if total_ext > 0 else 0.0
    cats["measured_fraction"] = cats["measured_us"] / total_meas if total_meas > 0 else 0.0
    return cats.sort_values("us", ascending=False).reset_index(drop=True)


def _block_span(ev: pd.DataFrame, idx: np.ndarray, inb: np.ndarray, steps: int) -> float:
    """The span of each block instance, from its first event's start to its last event's end, summed per step."""
    if not inb.any():
        return 0.0
    starts = pd.Series(ev["ts"].to_numpy(dtype=float)[inb]).groupby(idx[inb]).min()
    ends = pd.Series(ev["end"].to_numpy(dtype=float)[inb]).groupby(idx[inb]).max()
    return float((ends - starts).clip(lower=0).sum()) / steps
