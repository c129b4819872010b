"""`analyze(trace)`: load → attribute → classify → account, as one object notebooks can use.

See docs/architecture.md for every field.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.regex import compile_user_regex
from headroom.trace import attribute, cache, stored
from headroom.trace.accounting import (
    add_wall_shares,
    busy_per_device,
    category_table,
    kernel_table,
    op_table,
    step_bounds,
    step_table,
    union_length,
)
from headroom.trace.attribute import attribute_kernels_to_ops, cpu_op_self_times, unlaunched_warning
from headroom.trace.classify import Policy, Rule, classify_kernels, load_classifier
from headroom.trace.compiled import compiled_summary, fill_compiled
from headroom.trace.graphs import capture_trace_of, graph_summary
from headroom.trace.load import Trace, TraceError, find_trace_files, iter_traces, load_trace
from headroom.trace.modules import attribute_modules, module_calls, module_ranges
from headroom.trace.parallel import small_pages
from headroom.trace.phases import event_phases

MODE_GPU = "gpu"
MODE_CPU = "cpu-ops"
STEPS_BASIS = "ProfilerStep ranges"  # the only basis a manifest's unprofiled step time is measured on


def manifest_of(metadata: dict[str, Any]) -> dict[str, Any]:
    """The trace's `"headroom"` run manifest: an object, else none (a trace may carry anything there)."""
    m = metadata.get("headroom") if isinstance(metadata, dict) else None
    return m if isinstance(m, dict) else {}


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


_SIZE = re.compile(r"(?<=[-_])\d+(\.\d+)?[kmbt]$", re.IGNORECASE)
_LAYERS_TOKEN = re.compile(r"\d+of\d+-layers")


def run_name(m: dict[str, Any]) -> str:
    """The model a run profiled: the workload name with a flavour's size in place of the default's
    (`llama-7b --flavour 13b` -> `llama-13b`)."""
    name = str(m.get("workload") or "")
    flavour = str(m.get("flavour") or "")
    if not flavour or flavour == "default":
        return name
    if _SIZE.search(name) and re.fullmatch(r"\d+(\.\d+)?[kmbt]", flavour, re.IGNORECASE):
        return _SIZE.sub(flavour, name)
    return f"{name} ({flavour})"


def partial_layers(m: dict[str, Any]) -> tuple[int, int] | None:
    """(built, total) blocks of a `headroom profile --layers` run that built only some of them."""
    built, total = m.get("layers"), m.get("total_layers")
    if isinstance(built, int) and isinstance(total, int) and 0 < built < total:
        return built, total
    return None


def trace_label(a: Analysis, extrapolated: bool = False) -> str:
    """What tables and figures call a trace: the model and variant its manifest records
    (`llama-13b infer prefill (4 of 40 layers, extrapolated)`), else the file name."""
    m = a.manifest
    if m.get("workload"):
        variant = " ".join(t for t in str(m.get("variant") or "").split() if not _LAYERS_TOKEN.fullmatch(t))
        label = f"{run_name(m)}{' ' + variant if variant else ''}"
        part = partial_layers(m)
        if part:
            label += f" ({part[0]} of {part[1]} layers{', extrapolated' if extrapolated else ''})"
        return label
    name = Path(a.source).name
    for suffix in (".json.gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name


def _cpu_events(trace: Trace, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """CPU-only traces: each op's self time is the unit of work, classified by operator name."""
    ops = cpu_op_self_times(trace, steps)
    m = attribute_modules(trace, ops["pid"], ops["tid"], ops["ts"].to_numpy(dtype=float))
    names = ops["name"].astype(str).to_numpy(dtype=object)
    compiled = fill_compiled(
        trace,
        ops["pid"],
        ops["tid"],
        ops["ts"].to_numpy(dtype=float),
        names,
        {"module": m.module, "module_type": m.module_type, "module_stack": m.module_stack},
    )
    ev = pd.DataFrame(
        {
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
            "module": m.module,
            "module_type": m.module_type,
            "module_stack": m.module_stack,
            "compiled": compiled,
            "phase": event_phases(
                names, ops["top_op"].astype(str).to_numpy(dtype=object), np.full(len(ops), "", dtype=object), m.backward
            ),
            "launch_name": "",
            "launch_ts": ops["ts"],
            "launch_tid": ops["tid"].astype(str),
            "step": ops["step"],
        }
    )
    return ev


def window_steps(trace: Trace, pattern: str) -> pd.DataFrame:
    """Steps from the CPU ranges whose name matches `pattern` (RE2, case-insensitive): for traces
    without ProfilerStep ranges, e.g. an inference server's `execute_model` calls.

    Ranges inside another matching range belong to it (the outermost ones are the steps);
    columns as `Trace.steps`: step (0, 1, ...), ts, dur, end.
    """
    rx = compile_user_regex(pattern, "--window")
    cpu = trace.cpu
    names = cpu["name"].astype(str)
    hit = np.fromiter((rx.search(n) is not None for n in names.tolist()), dtype=bool, count=len(names))
    r = cpu.loc[hit, ["ts", "dur"]].sort_values(["ts", "dur"], ascending=[True, False])
    starts: list[float] = []
    ends: list[float] = []
    for ts, dur in zip(r["ts"].tolist(), r["dur"].tolist()):
        if ends and ts < ends[-1]:
            continue  # inside (or overlapping) the previous step
        starts.append(float(ts))
        ends.append(float(ts) + float(dur))
    return pd.DataFrame(
        {
            "step": np.arange(len(starts), dtype=np.int64),
            "ts": starts,
            "dur": np.subtract(ends, starts) if starts else [],
            "end": ends,
        }
    )


def _keyed(table: pd.DataFrame, key: str) -> pd.DataFrame:
    """The table indexed by its natural key (`a.categories.loc["gemm"]`); the key stays a column too."""
    table = table.copy()
    table.index = pd.Index(table[key].to_numpy(), name=None)
    return table


# The attributed GPU activities depend on the trace and on the attribution's code and data alone:
# cached beside the tables.
_ATTRIBUTION_CODE = (
    "attribute.py",
    "context.py",
    "compiled.py",
    "graphs.py",
    "modules.py",
    "phases.py",
    "intervals.py",
    "ranges.py",
    "codes.py",
    "op_inputs.py",
)
_ATTRIBUTION_VERSION = cache.code_version(
    *(Path(attribute.__file__).with_name(n) for n in _ATTRIBUTION_CODE),
    *(Path(attribute.__file__).parent.parent / "data" / n for n in ("phases.toml", "graphs.toml", "compiled.toml")),
)


def attributed(trace: Trace, steps: pd.DataFrame | None = None, graph_source: Trace | None = None) -> pd.DataFrame:
    """attribute_kernels_to_ops(trace, steps, graph_source), from the trace's cache entry when it has one
    (the trace's own ProfilerStep ranges only: other steps, e.g. a --window's, are attributed afresh; a
    graph source's cache key is part of the entry's name, and a source without one is attributed afresh)."""
    if (steps is not None and steps is not trace.steps) or (
        graph_source is not None and graph_source.cache_key is None
    ):
        return attribute_kernels_to_ops(trace, steps, graph_source)
    name = f"attributed-{_ATTRIBUTION_VERSION}"
    if graph_source is not None:
        name += f"-source-{graph_source.cache_key.entry.name}"
    events = cache.fetch_frame(trace.cache_key, name)
    if events is None:
        events = attribute_kernels_to_ops(trace, graph_source=graph_source)
        cache.store_frame(trace.cache_key, name, events)
    return events


def analyze(
    source: str | os.PathLike | Trace,
    rules: list[Rule] | str | os.PathLike | None = None,
    policy: Policy | str | os.PathLike | None = None,
    whole_trace: bool = False,
    window: str | None = None,
    lenient: bool = False,
    use_cache: bool = True,
    graph_source: str | os.PathLike | Trace | None = None,
) -> Analysis:
    """Classify where the time of one trace went.

    `rules`/`policy`: compiled objects, or paths of user TOML files that extend/override the shipped ones.
    The time analysed: the ProfilerStep ranges; `window`: instead, the CPU ranges whose name matches
    this regex (e.g. `execute_model`); `whole_trace`: everything. A trace without ProfilerStep ranges
    (a plain `with torch.profiler.profile():` block) is analysed whole, and `notes` says so.
    `lenient`: drop GPU activities and steps with impossible times instead of refusing the trace.
    `use_cache`: read/write the trace's columnar cache (headroom/trace/cache.py).
    `graph_source`: a trace of the same step run eagerly (or holding the graph's capture) that gives
    kernels replayed from a CUDA graph their op, module and phase when this trace does not hold the
    capture (headroom/trace/graphs.py).
    """
    trace = source if isinstance(source, Trace) else load_trace(source, lenient=lenient, use_cache=use_cache)
    if graph_source is None:
        graph_source = _manifest_capture(trace)
    if graph_source is not None and not isinstance(graph_source, Trace):
        graph_source = load_trace(graph_source, lenient=lenient, use_cache=use_cache)
    if not isinstance(rules, list) or not isinstance(policy, Policy):
        loaded_rules, loaded_policy = load_classifier(
            None if isinstance(rules, list) else rules, None if isinstance(policy, Policy) else policy
        )
        rules = rules if isinstance(rules, list) else loaded_rules
        policy = policy if isinstance(policy, Policy) else loaded_policy
    if whole_trace and window is not None:
        raise UserError("give either --window or --whole-trace, not both")
    name = stored.name_of(rules, policy, whole_trace, window)
    if graph_source is not None:
        if graph_source.cache_key is None:
            name = ""
        else:
            name += f"-source-{graph_source.cache_key.entry.name}"
    fields = stored.fetch(trace, name) if name else None
    if fields is not None:
        for f, key in stored.KEYS.items():
            fields[f] = _keyed(fields[f], key)
        return Analysis(source=trace.source, metadata=trace.metadata, trace=trace, **fields)
    with small_pages():
        a = _analyze(trace, rules, policy, whole_trace, window, graph_source)
    if a.step_ranges is not None and name:
        stored.store(trace, name, {f: getattr(a, f) for f in stored.FIELDS})
    return a


def _manifest_capture(trace: Trace) -> Path | None:
    """The capture trace that `headroom profile --graphs` wrote beside the trace, if it names one; a named
    one that is missing is an error (the replayed kernels would be left without ops)."""
    path = capture_trace_of(trace.source, trace.metadata)
    if path is not None and not path.is_file():
        raise TraceError(
            f"{trace.source}: its manifest names the CUDA graph's capture trace {path}, which is "
            f"missing (copy it beside the trace, or pass --graph-source)"
        )
    return path


def _analysed_time(
    trace: Trace, whole_trace: bool, window: str | None, notes: list[str]
) -> tuple[pd.DataFrame, str, bool]:
    """The ranges that count as steps, what they are called, and whether the whole trace is analysed (a trace
    without ProfilerStep ranges is, and `notes` says so)."""
    if window is not None:
        steps = window_steps(trace, window)
        if len(steps) == 0:
            raise TraceError(f"{trace.source}: --window {window!r} matches no CPU range in the trace")
        return steps, f"{len(steps)} range(s) matching {window!r}", whole_trace
    if whole_trace:
        return trace.steps, "whole trace", True
    if len(trace.steps) == 0:
        notes.append(
            "no ProfilerStep ranges: analysing the whole trace "
            "(--window REGEX picks steps by a range name, e.g. execute_model)"
        )
        return trace.steps, "whole trace", True
    return trace.steps, STEPS_BASIS, False


def _analyze(
    trace: Trace,
    rules: list[Rule],
    policy: Policy,
    whole_trace: bool,
    window: str | None,
    graph_source: Trace | None = None,
) -> Analysis:
    notes: list[str] = []
    steps, basis, whole_trace = _analysed_time(trace, whole_trace, window, notes)

    unprofiled = manifest_step_us(manifest_of(trace.metadata))
    if unprofiled is not None and basis != STEPS_BASIS:
        notes.append(
            f"the manifest's step time without the profiler ({unprofiled / 1e3:,.3f} ms) is per "
            f"ProfilerStep: the analysed time ({basis}) is not compared with it "
            f"(`project --step-ms` gives one for it)"
        )
    warnings = list(trace.warnings)
    if trace.has_gpu:
        mode = MODE_GPU
        events = attributed(trace, steps, graph_source)
    else:
        mode = MODE_CPU
        events = _cpu_events(trace, steps)
        if len(events) == 0:
            raise TraceError(f"{trace.source}: nothing to analyse (no GPU activity and no CPU ops)")

    if whole_trace:
        in_window = events
        start = float(min(events["ts"].min(), steps["ts"].min() if len(steps) else np.inf)) if len(events) else 0.0
        end = float(events["end"].max()) if len(events) else 0.0
        n_steps = 1  # the whole trace is one window: its per-step numbers are the whole trace's
        bounds = step_bounds(steps, events[events["step"] >= 0], events[events["step"] < 0])
    else:
        in_window = events[events["step"] >= 0]
        bounds = step_bounds(steps, in_window, events[events["step"] < 0])
        start, end = float(bounds["start"].min()), float(bounds["end"].max())
        n_steps = len(steps)
    if len(in_window) == 0:
        notes.append(f"no {'GPU activity' if mode == MODE_GPU else 'CPU op'} in the {basis}")
    del events  # the activities outside the window go before classifying (memory: the 4 GB trace's peak)
    events = classify_kernels(in_window.reset_index(drop=True), rules, policy)
    del in_window
    if mode == MODE_GPU:
        line = unlaunched_warning(events, trace)
        if line:
            warnings.append(line)
        graphs = graph_summary(events)
        if graphs is not None:
            notes.append(graphs.note())
    compiled = compiled_summary(events)
    if compiled is not None:
        notes.append(compiled.note())

    wall = end - start
    if not whole_trace and window is None:
        missing, gap = _missing_steps(bounds)
        if missing:
            # A step dropped by --lenient (or absent) leaves its time between its neighbours: none of its
            # work is counted, so neither is its time (it would read as idle).
            wall -= gap
            notes.append(
                f"{len(missing)} step(s) missing between the others ({', '.join(missing[:3])}"
                f"{', ...' if len(missing) > 3 else ''}): their {gap / 1e3:,.3f} ms are left out of the "
                f"analysed time, not counted as idle"
            )
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
        source=trace.source,
        mode=mode,
        events=events,
        window=(start, end),
        num_steps=n_steps,
        n_devices=n_devices,
        total_us=total,
        busy_us=busy,
        wall_us=wall,
        idle_us=max(wall * n_devices - busy, 0.0),
        addressable_us=addressable,
        categories=_keyed(category_table(events, total, wall * n_devices), "name"),
        kernels=_keyed(kernel_table(events), "name"),
        ops=_keyed(op_table(events), "op"),
        steps=_keyed(step_table(events, bounds), "step"),
        metadata=trace.metadata,
        trace=trace,
        basis=basis,
        notes=notes,
        warnings=warnings,
        step_ranges=steps,
        modules=module_calls(module_ranges(trace), None if whole_trace else steps),
    )


def _missing_steps(bounds: pd.DataFrame) -> tuple[list[str], float]:
    """ProfilerStep numbers absent between two present steps, and the time between those neighbours."""
    b = bounds.sort_values("step")
    n = b["step"].to_numpy()
    start, end = b["start"].to_numpy(dtype=float), b["end"].to_numpy(dtype=float)
    missing: list[str] = []
    gap = 0.0
    for i in np.nonzero(np.diff(n) > 1)[0]:
        missing += [f"ProfilerStep#{k}" for k in range(int(n[i]) + 1, int(n[i + 1]))]
        gap += max(0.0, float(start[i + 1] - end[i]))
    return missing, gap


def analyze_files(files: list[Path], lenient: bool = False, use_cache: bool = True, **kwargs) -> Iterator[Analysis]:
    """Each file's Analysis, in order; per-rank files are loaded two at a time when a core is free
    (load.iter_traces)."""
    for trace in iter_traces(files, lenient=lenient, use_cache=use_cache):
        yield analyze(trace, **kwargs)


def analyze_path(path: str | os.PathLike, **kwargs) -> list[Analysis]:
    """A trace file, or each per-rank trace in a directory."""
    return list(analyze_files(find_trace_files(Path(path)), **kwargs))
