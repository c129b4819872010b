"""The `Analysis` object: where one trace's time went (its fields: docs/architecture.md), what its run's
manifest records, and what tables and figures call it.

`headroom/trace/analysis.py` computes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from headroom.trace.analysis_terms import (  # noqa: F401 - the analysis' words, kept here
    MODE_CPU,
    MODE_GPU,
    STEPS_BASIS,
    manifest_of,
    partial_layers,
    run_label,
    run_name,
)
from headroom.trace.load import Trace
from headroom.trace.modules import module_calls


def manifest_step_us(manifest: dict[str, Any]) -> float | None:
    """The manifest's unprofiled step (``timing.step_ms``) in us: a positive finite number, else None."""
    timing = manifest.get("timing")
    v = timing.get("step_ms") if isinstance(timing, dict) else None
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 < v < 1e12
    return 1000.0 * float(v) if ok and v is not None else None


@dataclass
class Analysis:
    source: str
    mode: str
    events: pd.DataFrame
    window: tuple[float, float]
    num_steps: int
    n_devices: int
    total_us: float
    busy_us: float
    wall_us: float
    idle_us: float
    addressable_us: float
    categories: pd.DataFrame
    kernels: pd.DataFrame
    ops: pd.DataFrame
    steps: pd.DataFrame
    metadata: dict[str, Any] = field(default_factory=dict)
    trace: Trace | None = field(default=None, repr=False)
    # One row per nn.Module call in the window (headroom/trace/modules.py `module_calls`); empty when
    # the trace has no module ranges.
    modules: pd.DataFrame = field(default_factory=lambda: module_calls(pd.DataFrame()), repr=False)
    basis: str = STEPS_BASIS  # what time was analysed: the steps, a --window, the whole trace
    notes: list[str] = field(default_factory=list)  # caveats of the analysed time, printed as warnings
    warnings: list[str] = field(default_factory=list)  # the loader's and the attribution's, one line each
    step_ranges: pd.DataFrame | None = field(default=None, repr=False)  # the CPU ranges used as steps

    def __repr__(self) -> str:
        return (
            f"Analysis({Path(self.source).name!r}, {self.mode}, {self.num_steps} step(s), "
            f"step {self.step_us / 1e3:,.3f} ms, idle {100 * self.idle_fraction:.1f}%, "
            f"addressable {100 * self.addressable_fraction:.1f}% of {self.total_us / 1e3:,.3f} ms)"
        )

    @property
    def addressable_fraction(self) -> float:
        return self.addressable_us / self.total_us if self.total_us > 0 else 0.0

    @property
    def idle_fraction(self) -> float:
        cap = self.wall_us * self.n_devices
        return self.idle_us / cap if cap > 0 else 0.0

    @property
    def step_us(self) -> float:
        return self.wall_us / self.num_steps if self.num_steps else self.wall_us

    @property
    def manifest(self) -> dict[str, Any]:
        return manifest_of(self.metadata)

    @property
    def unprofiled_step_us(self) -> float | None:
        """The step time measured without the profiler (the manifest's ``timing.step_ms``), if recorded
        and the analysed time is the ProfilerSteps it was measured on (a --window or the whole trace spans
        other time: no unprofiled time of that span is known, and `notes` says so once)."""
        return manifest_step_us(self.manifest) if self.basis == STEPS_BASIS else None

    @property
    def unprofiled_idle_fraction(self) -> float | None:
        """GPU idle at the unprofiled step time, taking the profiled GPU busy time as unchanged
        (the profiler slows the CPU, not the kernels); None without an unprofiled step or a GPU."""
        step = self.unprofiled_step_us
        if step is None or self.mode != MODE_GPU:
            return None
        cap = step * max(self.num_steps, 1) * self.n_devices
        return max(0.0, 1.0 - self.busy_us / cap) if cap > 0 else None

    @property
    def device_name(self) -> str:
        props = self.metadata.get("deviceProperties") or []
        if isinstance(props, list) and props and isinstance(props[0], dict):
            return str(props[0].get("name", ""))
        return str(self.manifest.get("gpu", {}).get("name", "")) if isinstance(self.manifest.get("gpu"), dict) else ""

    @property
    def label(self) -> str:
        return trace_label(self)

    def to_frame(self) -> pd.DataFrame:
        """Where the time went: one row per category (name, us, fraction, wall_us, wall_fraction,
        addressable, count), longest first."""
        return self.categories.copy()

    def unknown_kernels(self, limit: int = 20) -> pd.DataFrame:
        k = self.kernels
        return k[k["category"] == "other"].head(limit)

    def to_dict(self, all_kernels: bool = False) -> dict[str, Any]:
        """The `headroom classify --json` contract (docs/architecture.md, "The `Analysis` object")."""
        out: dict[str, Any] = {
            "trace": self.source,
            "mode": self.mode,
            "basis": self.basis,
            "notes": list(self.notes) + list(self.warnings),
            "device": self.device_name,
            "num_steps": self.num_steps,
            "step_us": self.step_us,
            "total_us": self.total_us,
            "busy_us": self.busy_us,
            "idle_us": self.idle_us,
            "wall_us": self.wall_us,
            "idle_fraction": self.idle_fraction,
            "addressable_us": self.addressable_us,
            "addressable_fraction": self.addressable_fraction,
            "categories": [
                {
                    "name": r.name,
                    "us": float(r.us),
                    "fraction": float(r.fraction),
                    "wall_us": float(r.wall_us),
                    "wall_fraction": float(r.wall_fraction),
                    "addressable": bool(r.addressable),
                    "count": int(r.count),
                }
                for r in self.categories.itertuples(index=False)
            ],
            "steps": [
                {
                    "step": int(r.step),
                    "wall_us": float(r.wall_us),
                    "busy_us": float(r.busy_us),
                    "total_us": float(r.total_us),
                    "addressable_us": float(r.addressable_us),
                }
                for r in self.steps.itertuples(index=False)
            ],
            "unknown": [
                {"name": r.name, "us": float(r.us), "count": int(r.count)}
                for r in self.unknown_kernels().itertuples(index=False)
            ],
        }
        if self.unprofiled_step_us is not None:
            out["unprofiled"] = {
                "step_us": self.unprofiled_step_us,
                "idle_fraction": self.unprofiled_idle_fraction,
                "source": "manifest timing.step_ms (timed steps without the profiler)",
            }
        if self.manifest:
            out["manifest"] = self.manifest
        if all_kernels:
            out["kernels"] = [
                {
                    "name": r.name,
                    "category": r.category,
                    "addressable": bool(r.addressable),
                    "us": float(r.us),
                    "count": int(r.count),
                    "op": r.op,
                }
                for r in self.kernels.itertuples(index=False)
            ]
        return out


def trace_label(a: Analysis, extrapolated: bool = False) -> str:
    """What tables and figures call a trace (`run_label`)."""
    return run_label(a.manifest, a.source, extrapolated)
