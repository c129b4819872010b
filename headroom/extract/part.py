"""The part of a trace a set of module instances accounts for: its time, launches and phases.

A GPU event (or, in a CPU-only trace, a CPU operator's self time) belongs to an instance
at path P when the innermost module it was launched in is P or below it (``P.…``): the
kernels of an ``LlamaMLP`` include those of its ``gate_proj``. The module of an event is
``Analysis.events["module"]`` (module ranges recorded by `headroom profile`; backward
kernels carry the module of the forward op that created them). Where a trace's events
have no module but the trace has ``headroom/module <path> (<Class>)`` ranges, the module is
taken from the innermost such range on the launching thread (forward only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd

from headroom.project.matching import event_phase
from headroom.trace.attribute import containing_range
from headroom.trace.ranges import MODULE_RANGE_PREFIX

_RANGE = re.compile(r"^" + re.escape(MODULE_RANGE_PREFIX) + r"(?P<path>\S+)(?: \((?P<cls>[^)]*)\))?$")


def range_path(name: str) -> str | None:
    """`headroom/module model.layers.0.mlp (LlamaMLP)` -> `model.layers.0.mlp`."""
    m = _RANGE.match(name)
    return m.group("path") if m else None


def _modules_from_ranges(a: Any) -> np.ndarray:
    ev = a.events
    out = np.full(len(ev), "", dtype=object)
    trace = getattr(a, "trace", None)
    if trace is None or not len(ev):
        return out
    cpu = trace.cpu
    rng = cpu[(cpu["cat"] == "user_annotation") & cpu["name"].astype(str).str.startswith(MODULE_RANGE_PREFIX)]
    if not len(rng):
        return out
    paths = rng["name"].astype(str).map(range_path).to_numpy(dtype=object)
    tid_col = "launch_tid" if "launch_tid" in ev.columns else None
    if tid_col is None:
        return out
    when = ev["launch_ts"].to_numpy(dtype=float)
    ev_tid = ev[tid_col].astype(str).to_numpy()
    r_tid = rng["tid"].astype(str).to_numpy()
    ts = rng["ts"].to_numpy(dtype=float)
    end = ts + rng["dur"].to_numpy(dtype=float)
    for tid in np.unique(r_tid):
        ri = np.flatnonzero(r_tid == tid)
        ei = np.flatnonzero(ev_tid == tid)
        if not len(ei):
            continue
        hit = containing_range(ts[ri], end[ri], when[ei])
        ok = hit >= 0
        out[ei[ok]] = paths[ri[hit[ok]]]
    return out


def event_modules(a: Any) -> np.ndarray:
    """The innermost module path of every event of an Analysis (see the module docstring)."""
    ev = a.events
    if "module" in ev.columns:
        col = ev["module"].astype(object).where(ev["module"].notna(), "").astype(str).to_numpy(dtype=object)
        if (col != "").any():
            return col
    return _modules_from_ranges(a)


def inside(modules: np.ndarray, paths: Iterable[str]) -> np.ndarray:
    """Events whose module is one of `paths` or below one of them."""
    roots = set(paths)
    codes, uniques = pd.factorize(pd.Series(modules, dtype=object), sort=False)

    def hit(m: str) -> bool:
        if not m:
            return False
        parts = m.split(".")
        return any(".".join(parts[:k]) in roots for k in range(1, len(parts) + 1))

    flags = np.fromiter((hit(u) for u in uniques), dtype=bool, count=len(uniques))
    return flags[codes] if len(modules) else np.zeros(0, dtype=bool)


def event_phases(events: pd.DataFrame) -> np.ndarray:
    cols = [c for c in ("op", "top_op", "annotation") if c in events.columns]
    if not cols or not len(events):
        return np.full(len(events), "forward", dtype=object)
    keys = events[cols].astype(object).where(events[cols].notna(), "").astype(str)
    codes, uniq = pd.MultiIndex.from_frame(keys).factorize()
    return np.array([event_phase(*u) for u in uniq], dtype=object)[codes]


@dataclass
class PartTime:
    """A part's time and launches in one trace, per step (kernels in GPU mode, ops in cpu-ops mode)."""

    mode: str
    num_steps: int
    us: float
    forward_us: float
    backward_us: float
    kernels: int
    forward_kernels: int
    backward_kernels: int
    total_us: float

    def per_step(self, x: float) -> float:
        return x / self.num_steps if self.num_steps else x

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "num_steps": self.num_steps, "us": self.us, "forward_us": self.forward_us,
                "backward_us": self.backward_us, "kernels": self.kernels, "forward_kernels": self.forward_kernels,
                "backward_kernels": self.backward_kernels, "total_us": self.total_us}


def part_masks(a: Any, paths: Iterable[str]) -> dict[str, np.ndarray]:
    """Masks over `a.events`: the part (`all`), and its `forward` and `backward` events."""
    mask = inside(event_modules(a), paths)
    ph = event_phases(a.events)
    return {"all": mask, "forward": mask & (ph == "forward"), "backward": mask & (ph == "backward")}


def part_time(a: Any, paths: Iterable[str]) -> PartTime:
    m = part_masks(a, paths)
    dur = a.events["dur"].to_numpy(dtype=float) if len(a.events) else np.zeros(0)
    return PartTime(mode=a.mode, num_steps=int(a.num_steps), us=float(dur[m["all"]].sum()),
                    forward_us=float(dur[m["forward"]].sum()), backward_us=float(dur[m["backward"]].sum()),
                    kernels=int(m["all"].sum()), forward_kernels=int(m["forward"].sum()),
                    backward_kernels=int(m["backward"].sum()), total_us=float(a.total_us))
