"""The part of a trace a set of module instances accounts for: its time, launches and phases.

A GPU event (or, in a CPU-only trace, a CPU operator's self time) belongs to an instance
at path P when the innermost module it ran for is P or below it (``P.…``): the kernels of
a ``LlamaMLP`` include those of its ``gate_proj``. The module and phase of an event are
``Analysis.events["module"]`` and ``["phase"]`` (module ranges recorded by `headroom
profile`; backward kernels carry the module of the forward op autograd ran them for,
headroom/trace/modules.py). Paths in a trace start with the module-range root
(`MODULE_ROOT`, "model"): the instance `layers.0.mlp` of the ranged module is
`model.layers.0.mlp` there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headroom.profile.run import MODULE_ROOT
from headroom.trace.phases import event_phases


def trace_path(path: str) -> str:
    """The path a module range names for the instance at `path` of the ranged module."""
    return f"{MODULE_ROOT}.{path}" if path else MODULE_ROOT


def _column(events: pd.DataFrame, name: str) -> np.ndarray:
    if name not in events.columns:
        return np.full(len(events), "", dtype=object)
    col = events[name]
    return col.astype(object).where(col.notna(), "").astype(str).to_numpy(dtype=object)


def inside(modules: np.ndarray, paths: Iterable[str]) -> np.ndarray:
    """Events whose module is one of `paths` (trace paths) or below one of them."""
    roots = set(paths)
    if not len(modules):
        return np.zeros(0, dtype=bool)
    codes, uniques = pd.factorize(pd.Series(modules, dtype=object), sort=False)

    def hit(m: str) -> bool:
        parts = m.split(".") if m else []
        return any(".".join(parts[:k]) in roots for k in range(1, len(parts) + 1))

    return np.fromiter((hit(u) for u in uniques), dtype=bool, count=len(uniques))[codes]


def phases(events: pd.DataFrame) -> np.ndarray:
    if "phase" in events.columns:
        return _column(events, "phase")
    return event_phases(_column(events, "op"), _column(events, "top_op"), _column(events, "annotation"))


@dataclass
class PartTime:
    """A part's time and launches per step in one trace (kernels in GPU mode, CPU ops in cpu-ops mode).

    Times are the median over the profiled steps of each step's sum, so one step disturbed by
    something else on the machine (a descheduled CPU thread) does not become the answer;
    launch counts are the mean per step (they do not vary from step to step)."""

    mode: str
    num_steps: int
    us: float
    forward_us: float
    backward_us: float
    kernels: float
    forward_kernels: float
    backward_kernels: float
    total_us: float


def part_masks(a: Any, paths: Iterable[str]) -> dict[str, np.ndarray]:
    """Masks over `a.events` for instance paths (of the ranged module): the part, its forward, its backward."""
    mask = inside(_column(a.events, "module"), [trace_path(p) for p in paths])
    ph = phases(a.events)
    return {"all": mask, "forward": mask & (ph == "forward"), "backward": mask & (ph == "backward")}


def _per_step(dur: np.ndarray, step: np.ndarray, steps: np.ndarray, mask: np.ndarray | None) -> float:
    """Median over `steps` of the summed duration of the (masked) events of each step."""
    if not len(steps):
        return float(dur[mask].sum()) if mask is not None else float(dur.sum())
    sel = np.ones(len(dur), dtype=bool) if mask is None else mask
    sums = [float(dur[sel & (step == k)].sum()) for k in steps]
    return float(np.median(sums))


def part_time(a: Any, paths: Iterable[str]) -> PartTime:
    m = part_masks(a, paths)
    ev = a.events
    dur = ev["dur"].to_numpy(dtype=float) if len(ev) else np.zeros(0)
    step = ev["step"].to_numpy() if "step" in ev.columns else np.zeros(len(ev), dtype=int)
    steps = np.unique(step[step >= 0]) if len(step) else np.zeros(0, dtype=int)
    n = max(int(a.num_steps), 1)
    return PartTime(
        mode=a.mode,
        num_steps=int(a.num_steps),
        us=_per_step(dur, step, steps, m["all"]),
        forward_us=_per_step(dur, step, steps, m["forward"]),
        backward_us=_per_step(dur, step, steps, m["backward"]),
        kernels=float(m["all"].sum()) / n,
        forward_kernels=float(m["forward"].sum()) / n,
        backward_kernels=float(m["backward"].sum()) / n,
        total_us=_per_step(dur, step, steps, None),
    )
