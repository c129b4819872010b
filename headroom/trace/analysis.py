"""`analyze(trace)`: load → attribute → classify → account, as one object notebooks can use.

See docs/architecture.md for every field.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from headroom.trace.accounting import (add_wall_shares, busy_per_device, category_table, kernel_table,
                                 op_table, step_bounds, step_table, union_length)
from headroom.trace import attribute, cache
from headroom.trace.attribute import attribute_kernels_to_ops, cpu_op_self_times, unlaunched_warning
from headroom.trace.classify import Policy, Rule, classify_kernels, load_policy, load_rules
from headroom.trace.load import Trace, TraceError, find_trace_files, iter_traces, load_trace

MODE_GPU = "gpu"
MODE_CPU = "cpu-ops"


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
    trace: Trace | None = None
    warnings: list[str] = field(default_factory=list)   # the loader's and the attribution's, one line each

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
        return self.metadata.get("headroom") or {}

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
                {"name": r.name, "us": float(r.us), "fraction": float(r.fraction),
                 "wall_us": float(r.wall_us), "wall_fraction": float(r.wall_fraction),
                 "addressable": bool(r.addressable), "count": int(r.count)}
                for r in self.categories.itertuples(index=False)
            ],
            "steps": [
                {"step": int(r.step), "wall_us": float(r.wall_us), "busy_us": float(r.busy_us),
                 "total_us": float(r.total_us), "addressable_us": float(r.addressable_us)}
                for r in self.steps.itertuples(index=False)
            ],
            "unknown": [{"name": r.name, "us": float(r.us), "count": int(r.count)}
                        for r in self.unknown_kernels().itertuples(index=False)],
        }
        if self.manifest:
            out["manifest"] = self.manifest
        if all_kernels:
            out["kernels"] = [
                {"name": r.name, "category": r.category, "addressable": bool(r.addressable),
                 "us": float(r.us), "count": int(r.count), "op": r.op}
                for r in self.kernels.itertuples(index=False)
            ]
        return out


def trace_label(a: Analysis) -> str:
    """What tables and figures call a trace: the workload and variant its manifest records, else the file name."""
    m = a.manifest
    if m.get("workload"):
        variant = m.get("variant") or ""
        return f"{m['workload']}{' ' + variant if variant else ''}"
    name = Path(a.source).name
    for suffix in (".json.gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name


def _cpu_events(trace: Trace) -> pd.DataFrame:
    """CPU-only traces: each op's self time is the unit of work, classified by operator name."""
    ops = cpu_op_self_times(trace)
    ev = pd.DataFrame({
        "name": ops["name"].astype(str),
        "kind": "cpu_op",
        "device": -1,
        "stream": ops["tid"].astype(str),
        "ts": ops["ts"],
        "dur": ops["self_us"],
        "end": ops["end"],
        "op": ops["name"].astype(str),
        "top_op": ops["top_op"].astype(str),
        "annotation": "",
        "module": "",
        "launch_name": "",
        "launch_ts": ops["ts"],
        "launch_tid": ops["tid"].astype(str),
        "step": ops["step"],
    })
    return ev


# The attributed GPU activities depend on the trace and on attribute.py alone: cached beside the tables.
_ATTRIBUTION_VERSION = cache.code_version(Path(attribute.__file__))


def attributed(trace: Trace) -> pd.DataFrame:
    """attribute_kernels_to_ops(trace), from the trace's cache entry when it has one."""
    name = f"attributed-{_ATTRIBUTION_VERSION}"
    events = cache.fetch_frame(trace.cache_key, name)
    if events is None:
        events = attribute_kernels_to_ops(trace)
        cache.store_frame(trace.cache_key, name, events)
    return events


def analyze(source: str | os.PathLike | Trace, rules: list[Rule] | str | os.PathLike | None = None,
            policy: Policy | str | os.PathLike | None = None, whole_trace: bool = False,
            lenient: bool = False, use_cache: bool = True) -> Analysis:
    """Classify where the time of one trace went.

    `rules`/`policy`: compiled objects, or paths of user TOML files that extend/override the shipped ones.
    `whole_trace`: use the whole trace instead of requiring ProfilerStep ranges.
    `lenient`: drop GPU activities and steps with impossible times instead of refusing the trace.
    `use_cache`: read/write the trace's columnar cache (headroom/trace/cache.py).
    """
    trace = source if isinstance(source, Trace) else load_trace(source, lenient=lenient, use_cache=use_cache)
    if not isinstance(rules, list):
        rules = load_rules(rules)
    if not isinstance(policy, Policy):
        policy = load_policy(policy)

    steps = trace.steps
    if len(steps) == 0 and not whole_trace:
        raise TraceError(f"{trace.source}: no ProfilerStep#N ranges (profile with a schedule and "
                         f"prof.step(), or pass --whole-trace)")

    warnings = list(trace.warnings)
    if trace.has_gpu:
        mode = MODE_GPU
        events = attributed(trace)
    else:
        mode = MODE_CPU
        events = _cpu_events(trace)

    if whole_trace:
        in_window = events
        start = float(min(events["ts"].min(), steps["ts"].min() if len(steps) else np.inf)) if len(events) else 0.0
        end = float(events["end"].max()) if len(events) else 0.0
        n_steps = max(len(steps), 1)
        bounds = step_bounds(steps, events[events["step"] >= 0], events[events["step"] < 0])
    else:
        in_window = events[events["step"] >= 0]
        bounds = step_bounds(steps, in_window, events[events["step"] < 0])
        start, end = float(bounds["start"].min()), float(bounds["end"].max())
        n_steps = len(steps)
    events = classify_kernels(in_window.reset_index(drop=True), rules, policy)
    if mode == MODE_GPU:
        line = unlaunched_warning(events, trace)
        if line:
            warnings.append(line)

    wall = end - start
    if mode == MODE_GPU:
        events = add_wall_shares(events)
        busy_by_dev = busy_per_device(events)
        n_devices = max(len(busy_by_dev), 1)
        busy = float(sum(busy_by_dev.values()))
    else:
        # CPU ranges nest and run on several threads: busy is the union of their
        # intervals; self times are scaled to it so shares never exceed wall.
        n_devices = 1
        busy = union_length(events["ts"].to_numpy(), events["end"].to_numpy())
        total_self = float(events["dur"].sum())
        events["wall_us"] = events["dur"] * (busy / total_self if total_self > 0 else 0.0)
    total = float(events["dur"].sum())
    addressable = float(events.loc[events["addressable"], "dur"].sum()) if len(events) else 0.0
    return Analysis(
        source=trace.source, mode=mode, events=events, window=(start, end), num_steps=n_steps,
        n_devices=n_devices, total_us=total, busy_us=busy, wall_us=wall,
        idle_us=max(wall * n_devices - busy, 0.0), addressable_us=addressable,
        categories=category_table(events, total, wall * n_devices),
        kernels=kernel_table(events), ops=op_table(events),
        steps=step_table(events, bounds),
        metadata=trace.metadata, trace=trace, warnings=warnings,
    )


def analyze_files(files: list[Path], lenient: bool = False, use_cache: bool = True, **kwargs) -> Iterator[Analysis]:
    """Each file's Analysis, in order; per-rank files are loaded two at a time when a core is free
    (load.iter_traces)."""
    for trace in iter_traces(files, lenient=lenient, use_cache=use_cache):
        yield analyze(trace, **kwargs)


def analyze_path(path: str | os.PathLike, **kwargs) -> list[Analysis]:
    """A trace file, or each per-rank trace in a directory."""
    return list(analyze_files(find_trace_files(Path(path)), **kwargs))
