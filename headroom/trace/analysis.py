"""`analyze(trace)`: load → attribute → classify → account, as one object notebooks can use.

See docs/architecture.md for every field.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

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
from headroom.trace.analysis_result import (
    MODE_CPU,
    MODE_GPU,
    STEPS_BASIS,
    Analysis,
    manifest_of,
    manifest_step_us,
)
from headroom.trace.attribute import attribute_kernels_to_ops, cpu_op_self_times, unlaunched_warning
from headroom.trace.classify import Policy, Rule, classify_kernels, load_classifier
from headroom.trace.compiled import compiled_summary, fill_compiled
from headroom.trace.graphs import capture_trace_of, graph_summary
from headroom.trace.load import Trace, TraceError, find_trace_files, iter_traces, load_trace
from headroom.trace.modules import attribute_modules, module_calls, module_ranges
from headroom.trace.parallel import small_pages
from headroom.trace.phases import event_phases


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

    in_window, bounds, (start, end), n_steps = _window(events, steps, whole_trace)
    if len(in_window) == 0:
        notes.append(f"no {'GPU activity' if mode == MODE_GPU else 'CPU op'} in the {basis}")
    del events  # the activities outside the window go before classifying (memory: the 4 GB trace's peak)
    events = classify_kernels(in_window.reset_index(drop=True), rules, policy)
    del in_window
    _note_events(events, trace, mode, notes, warnings)

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
    events, n_devices, busy = _busy(events, mode)
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


def _window(
    events: pd.DataFrame, steps: pd.DataFrame, whole_trace: bool
) -> tuple[pd.DataFrame, pd.DataFrame, tuple[float, float], int]:
    """The activities in the analysed time, each step's bounds, the window (start, end) and its number of steps
    (the whole trace is one window: its per-step numbers are the whole trace's)."""
    if whole_trace:
        start = float(min(events["ts"].min(), steps["ts"].min() if len(steps) else np.inf)) if len(events) else 0.0
        end = float(events["end"].max()) if len(events) else 0.0
        bounds = step_bounds(steps, events[events["step"] >= 0], events[events["step"] < 0])
        return events, bounds, (start, end), 1
    in_window = events[events["step"] >= 0]
    bounds = step_bounds(steps, in_window, events[events["step"] < 0])
    return in_window, bounds, (float(bounds["start"].min()), float(bounds["end"].max())), len(steps)


def _note_events(events: pd.DataFrame, trace: Trace, mode: str, notes: list[str], warnings: list[str]) -> None:
    """What the classified activities call for saying: GPU work without a launch, CUDA graph replays, compiled
    code."""
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


def _busy(events: pd.DataFrame, mode: str) -> tuple[pd.DataFrame, int, float]:
    """The events with their wall shares, the number of devices, and the busy time summed over them."""
    if mode == MODE_GPU:
        events = add_wall_shares(events)
        busy_by_dev = busy_per_device(events)
        return events, max(len(busy_by_dev), 1), float(sum(busy_by_dev.values()))
    # CPU ranges nest and run on several threads: busy is the union of their
    # intervals; self times are scaled to it so shares never exceed wall.
    busy = union_length(events["ts"].to_numpy(), events["end"].to_numpy())
    total_self = float(events["dur"].sum())
    events["wall_us"] = events["dur"] * (busy / total_self if total_self > 0 else 0.0)
    return events, 1, busy


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
