"""The baseline a projection starts from, and how its device time divides (kernels, memory,
communication, idle)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from headroom.trace.accounting import add_wall_shares
from headroom.trace.analysis import Analysis
from headroom.trace.classify import category_group
from headroom.trace.load import Trace


@dataclass(frozen=True)
class _Deferred:
    """A table of a Trace, read when the projection first uses it."""

    trace: Trace
    table: str


class _TraceTable:
    """A Baseline field holding a table, or a `_Deferred` one read on first use: `targets` replays
    without the CPU ranges, and a cached trace then never reads them (`load.DeferredTrace`)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = "_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> pd.DataFrame | None:
        if obj is None:
            return None  # the field's default
        value = obj.__dict__.get(self._attr)
        if isinstance(value, _Deferred):
            value = obj.__dict__[self._attr] = getattr(value.trace, value.table)
        return value

    def __set__(self, obj: Any, value: pd.DataFrame | _Deferred | None) -> None:
        obj.__dict__[self._attr] = value


@dataclass
class Baseline:
    """What the projections need from an analysed trace (or from a synthetic table in tests)."""

    events: pd.DataFrame
    wall_us: float
    window: tuple[float, float]
    num_steps: int = 1
    n_devices: int = 1
    mode: str = "gpu"
    source: str = ""
    runtime: pd.DataFrame | None = _TraceTable()  # runtime/driver calls: name, pid, tid, ts, dur, correlation
    syncs: pd.DataFrame | None = _TraceTable()  # cuda_sync events, when the trace has them
    step_end: float | None = None  # CPU end of the last ProfilerStep (the window may end there)
    # CPU ranges (cpu_op, user_annotation, python_function): name, cat, pid, tid, ts, dur
    cpu: pd.DataFrame | None = _TraceTable()
    step_start: float | None = None  # CPU start of the first ProfilerStep (where the CPU model's clock starts)
    manifest: dict = field(default_factory=dict)  # headroom profile's run manifest, when the trace has one
    modules: pd.DataFrame | None = None  # one row per nn.Module call (Analysis.modules), when the trace has them
    # Time inside the window that is not analysed (the place of a step missing between two others): a
    # replay spans the window and leaves this out of its result, as the analysis leaves it out of wall_us.
    excluded_us: float = 0.0

    @property
    def per_step_us(self) -> float:
        return self.wall_us / self.num_steps if self.num_steps else self.wall_us

    @classmethod
    def from_analysis(cls, a: Analysis) -> Baseline:
        trace = a.trace
        # The ranges that count as steps: --window ranges when chosen, else the ProfilerStep ranges.
        steps = a.step_ranges if a.step_ranges is not None else (trace.steps if trace is not None else None)
        has_steps = steps is not None and len(steps) > 0
        return cls(
            events=a.events,
            wall_us=float(a.wall_us),
            window=(float(a.window[0]), float(a.window[1])),
            num_steps=int(a.num_steps),
            n_devices=int(a.n_devices),
            mode=a.mode,
            source=a.source,
            runtime=_Deferred(trace, "launches") if trace is not None else None,
            syncs=_Deferred(trace, "syncs") if trace is not None else None,
            step_end=float(steps["end"].max()) if steps is not None and has_steps else None,
            manifest=_comparable_manifest(a),
            cpu=_Deferred(trace, "cpu") if trace is not None else None,
            step_start=float(steps["ts"].min()) if steps is not None and has_steps else None,
            modules=a.modules,
            excluded_us=max(0.0, float(a.window[1]) - float(a.window[0]) - float(a.wall_us)),
        )

    @classmethod
    def from_events(
        cls,
        events: pd.DataFrame,
        window: tuple[float, float] | None = None,
        num_steps: int = 1,
        runtime: pd.DataFrame | None = None,
        step_end: float | None = None,
        cpu: pd.DataFrame | None = None,
        modules: pd.DataFrame | None = None,
    ) -> Baseline:
        """A baseline from a plain events table (columns as in Analysis.events; `wall_us` added if absent)."""
        ev = events.copy()
        if "end" not in ev.columns:
            ev["end"] = ev["ts"] + ev["dur"]
        for col, default in (
            ("device", 0),
            ("stream", 0),
            ("kind", "kernel"),
            ("category", "other"),
            ("addressable", True),
        ):
            if col not in ev.columns:
                ev[col] = default
        if "wall_us" not in ev.columns:
            ev = add_wall_shares(ev)
        if window is None:
            window = (float(ev["ts"].min()), float(ev["end"].max()))
        n_dev = max(int(ev["device"].nunique()), 1)
        return cls(
            events=ev.reset_index(drop=True),
            wall_us=float(window[1] - window[0]),
            window=(float(window[0]), float(window[1])),
            num_steps=num_steps,
            n_devices=n_dev,
            runtime=runtime,
            step_end=step_end,
            cpu=cpu,
            modules=modules,
        )


def _comparable_manifest(a: Analysis) -> dict:
    """The manifest, without its `timing` (the unprofiled step and its spread, measured per ProfilerStep)
    where the analysed time is another span (a --window, the whole trace): no projection compares that
    span with a step's time (Analysis.notes says so once)."""
    from headroom.trace.analysis import STEPS_BASIS

    m = dict(a.manifest)
    if a.basis != STEPS_BASIS:
        m.pop("timing", None)
    return m


def as_baseline(x: Baseline | Analysis) -> Baseline:
    return x if isinstance(x, Baseline) else Baseline.from_analysis(x)


@dataclass
class Breakdown:
    """How the window's device time divides (summed over devices; fractions of wall x devices)."""

    capacity_us: float
    kernel_us: float
    memory_us: float
    communication_us: float
    idle_us: float

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "capacity_us",
        "kernel_us",
        "memory_us",
        "communication_us",
        "idle_us",
        "kernel_fraction",
        "memory_fraction",
        "communication_fraction",
        "idle_fraction",
    )

    def _of_capacity(self, us: float) -> float:
        return us / self.capacity_us if self.capacity_us > 0 else 0.0

    @property
    def kernel_fraction(self) -> float:
        return self._of_capacity(self.kernel_us)

    @property
    def memory_fraction(self) -> float:
        return self._of_capacity(self.memory_us)

    @property
    def communication_fraction(self) -> float:
        return self._of_capacity(self.communication_us)

    @property
    def idle_fraction(self) -> float:
        return self._of_capacity(self.idle_us)


def kept(b: Baseline, name: str, *depends: Any) -> dict:
    """A dict kept on the baseline under `name`, emptied when one of `depends` (fields of the baseline it was
    computed from) was replaced: tables compare by identity, other values by equality."""
    held = b.__dict__.get(name)
    if (
        held is None
        or len(held[0]) != len(depends)
        or not all(
            a is d or not isinstance(a, pd.DataFrame) and not isinstance(d, pd.DataFrame) and a == d
            for a, d in zip(held[0], depends)
        )
    ):
        held = b.__dict__[name] = (depends, {})
    return held[1]


def _buckets(b: Baseline) -> tuple[np.ndarray, np.ndarray]:
    """Which of the baseline's events are memory traffic and which communication: kept on it (a projection
    asks once per scenario and method, five times for one speedup), again when its events were replaced."""
    memo = kept(b, "_buckets", b.events)
    if "masks" not in memo:
        masks = _event_buckets(b.events)
        for m in masks:
            m.setflags(write=False)  # shared by every later caller
        memo["masks"] = masks
    return memo["masks"]


def _event_buckets(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    cat = (
        events["category"].astype(str).to_numpy()
        if "category" in events.columns
        else np.full(len(events), "other", dtype=object)
    )
    kind = (
        events["kind"].astype(str).to_numpy()
        if "kind" in events.columns
        else np.full(len(events), "kernel", dtype=object)
    )
    mem = np.isin(cat, category_group("memory")) | (kind == "memcpy") | (kind == "memset")
    comm = np.isin(cat, category_group("communication")) & ~mem
    return mem, comm


def _breakdown(b: Baseline, shares: np.ndarray, window_us: float) -> Breakdown:
    """The device time of a window of `window_us` with these per-event shares of it."""
    mem, comm = _buckets(b)
    busy = float(shares.sum())
    cap = window_us * b.n_devices
    m = float(shares[mem].sum())
    c = float(shares[comm].sum())
    return Breakdown(cap, busy - m - c, m, c, max(cap - busy, 0.0))


def baseline_breakdown(base: Baseline | Analysis) -> Breakdown:
    b = as_baseline(base)
    return _breakdown(b, b.events["wall_us"].to_numpy(dtype=float), b.wall_us)
