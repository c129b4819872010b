"""The calls a speedup entry replaces: each launch-aware entry's calls and what each CPU outcome makes of them
(:mod:`headroom.projection.cpu`), the CPU clock calls measured outside the profiler give, and on a cpu-ops trace
(no kernels) the calls' inclusive CPU time. Used by :func:`headroom.projection.project.project`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from headroom.jsonio import plain
from headroom.projection.baseline import Baseline
from headroom.projection.calls import cpu_trace_calls, find_calls, replayed_from_graph
from headroom.projection.cpu import CallChange, CpuSide, change_calls, cpu_side
from headroom.projection.estimate import BOUNDS
from headroom.projection.graph_calls import graph_calls, graph_changes, node_gap_us
from headroom.projection.matching import EntryMatch, EntryResult, Resolution, resolve
from headroom.projection.overhead import Unprofiled, cpu_clock, noise
from headroom.projection.problems import ProblemMap
from headroom.projection.replay import replay
from headroom.projection.speedups import Speedup


def apply_entries(
    b: Baseline,
    entries: Sequence[Speedup],
    problems: ProblemMap,
    strict: bool,
    unprof: Unprofiled | None,
    warnings: list[str],
    changes: dict[str, list[CallChange]],
) -> tuple[Resolution, list[EntryResult], tuple[float, float] | None, Unprofiled | None]:
    """The entries matched to the trace's kernels; on a GPU trace the calls they replace (into `changes`, per
    bound) and the CPU clock measured calls give, on a cpu-ops trace the calls' CPU time."""
    res = resolve(list(entries), b.events, problems, strict=strict)
    warnings.extend(res.warnings)
    entry_results = [EntryResult.of(m) for m in res.matches]
    cpu_calls = None
    if b.mode == "gpu":
        warnings.extend(uncaptured_verify_warnings(b, res))
        unprof = clock_from_calls(b, res, problems, unprof)
        side: CpuSide | None = None
        for m, d in zip(res.matches, entry_results):
            if m.entry.launches is None or not m.applied.any():
                continue
            side = side or cpu_side(b)
            info, by_bound, w = entry_calls(b, side, m, problems, unprof)
            warnings.extend(w)
            d.cpu = info
            for bound in BOUNDS:
                changes[bound].extend(by_bound[bound])
    else:
        cpu_calls = cpu_trace_call_time(b, res, problems, entry_results)
        if any(e.launches is not None for e in entries):
            warnings.append(
                "launches per call are not modelled in cpu-ops mode (no kernel launches): "
                "the calls' CPU time is what their speedup applies to"
            )
    return res, entry_results, cpu_calls, unprof


def uncaptured_verify_warnings(b: Baseline, res: Resolution) -> list[str]:
    """A verify result applied to kernels this trace replays from CUDA graphs, when verify did not run
    it as a replay does (`--graphs`): its speedup is an eager clock's, launches included."""
    replayed = replayed_from_graph(b.events)
    out = []
    for m in res.matches:
        e = m.entry
        n = int((m.applied & replayed).sum())
        if e.verify_result and n and (e.capture is None or e.capture == "not checked"):
            out.append(
                f"{e.selector}: verified without --graphs, but {n} of the kernels it applies to are replayed from "
                f"CUDA graphs here; `headroom verify --graphs` checks it captures and times it as a replay runs it"
            )
    return out


def clock_from_calls(
    b: Baseline, res: Resolution, problems: ProblemMap, unprof: Unprofiled | None
) -> Unprofiled | None:
    """The CPU clock from calls measured outside the profiler (`reference_call_us`: verify): that time
    over the trace's footprint of the same calls (median over such entries; the calls with a range).

    Where the profiled step is within drift of the unprofiled one, the step says nothing of how much
    slower the profiled CPU ran (the GPU hid it) and the replay keeps the profiled clock (x1). That is
    harmless until a change makes the CPU matter: a host synchronisation per call drains the GPU's
    queue, and the CPU work after it runs at the replay's CPU speed. So an entry that adds
    synchronisations gives the clock, taken when below 1 and when the replay at it still spans the
    unprofiled step within drift.

    Where the step's clock is a correction (`solve_cpu_scale` below 1), it puts all of the unprofiled
    step's difference from the profiled replay on the CPU: the slowest CPU the step allows, exact only
    if the GPU ran as fast in the timed steps as under the profiler. Where the timed steps' kernels ran
    slower, it reads that as CPU overhead and can make a GPU-bound trace CPU-bound. Any entry's measured
    calls then give the clock, taken when faster than the step's and when the GPU can account for the
    rest of the step: the replay at the calls' clock with every kernel slower by that rest (and drift)
    spans the step. The rest is the GPU's (`window_scale`). A launch-bound step fails that test (slower
    kernels do not lengthen it): its step is the CPU's, and the step's clock stays.
    """
    if unprof is None or not unprof.reached:
        return unprof
    corrected = unprof.cpu_scale < 1.0
    ratios: list[float] = []
    side: CpuSide | None = None
    for m in res.matches:
        e = m.entry
        if (not corrected and not e.syncs) or e.reference_call_us is None or e.launches is None or not m.applied.any():
            continue
        side = side or cpu_side(b)
        calls, _ = find_calls(b, side, e.selector, m.applied, problems)
        footprints = [c.footprint_us for c in calls if not c.orphan and c.footprint_us > 0]
        if footprints:
            ratios.append(e.reference_call_us / float(np.median(footprints)))
    scale = float(np.median(ratios)) if ratios else 1.0
    if not 0.0 < scale < unprof.cpu_scale:
        return unprof
    target = unprof.step_us * unprof.num_steps
    window = replay(b, cpu_scale=scale).projected_us
    drift = noise(b)
    rest = target / window
    if not corrected and abs(window / target - 1.0) > drift:
        return unprof
    if corrected and rest > 1.0 + drift:
        slower = np.full(len(b.events), 1.0 / (rest * (1.0 + drift)))
        if replay(b, slower, cpu_scale=scale).projected_us < target:
            return unprof
    n = len(ratios)
    note = (
        f"the CPU clock from the reference's calls measured unprofiled (verify's call_us over their footprint "
        f"in this trace, median of {n} entr{'y' if n == 1 else 'ies'})"
    )
    if corrected:
        note += f", faster than the step's ({cpu_clock(unprof.cpu_scale)})"
        if abs(rest - 1.0) > 1e-3:
            note += f"; the rest of the unprofiled step ({100 * (rest - 1.0):+.1f}%) taken as the GPU's"
    return dataclasses.replace(
        unprof,
        cpu_scale=scale,
        window_scale=rest,
        clock_source="calls",
        note=f"{unprof.note}; {note}" if unprof.note else note,
    )


def entry_calls(
    b: Baseline, side: CpuSide, m: EntryMatch, problems: ProblemMap, unprof: Unprofiled | None
) -> tuple[dict, dict[str, list[CallChange]], list[str]]:
    """One launch-aware entry: its calls, what each CPU outcome makes of them, and a summary."""
    e = m.entry
    assert e.launches is not None, "only entries that give launches per call reach here"
    launches = e.launches
    calls, warnings = find_calls(b, side, e.selector, m.applied, problems)
    o = unprof.per_record_us if unprof is not None else 0.0
    scale = unprof.cpu_scale if unprof is not None else 1.0
    in_graph_calls = graph_calls(b, e.selector, m.applied, problems)
    # no CPU side: the same in every bound
    graph = graph_changes(in_graph_calls, launches, node_gap_us(b) if in_graph_calls else 0.0)
    by_bound = {
        bound: change_calls(calls, launches, side, bound, o, scale, e.call_us, e.syncs, e.reference_call_us) + graph
        for bound in BOUNDS
    }
    est = by_bound["estimate"]
    kernels = np.array([c.kernels for c in calls]) if calls else np.zeros(0)
    blocked = [c for c in calls if c.blocked]
    if blocked:
        warnings.append(
            f"{e.label}: {len(blocked)} call(s) hold a blocking call ({blocked[0].blocked}); "
            f"their CPU side is left unchanged"
        )
    in_graph = int((m.applied & replayed_from_graph(b.events)).sum())
    if in_graph and e.syncs:
        warnings.append(
            f"{e.label}: the candidate synchronises with the host ({e.syncs:g} per call, measured by "
            f"verify), which a CUDA graph cannot capture, and {in_graph} of the kernels it replaces run "
            f"in one: it breaks the capture; this projection keeps the graph"
        )
    kinds = sorted({c.kind for c in calls})
    main = max(calls, key=lambda c: c.footprint_us) if calls else None
    cost = side.cost(main.pid, main.tid) if main else None
    steps = max(b.num_steps, 1)
    ratio = e.call_us / e.reference_call_us if e.call_us is not None and e.reference_call_us else None
    info = {
        "launches": e.launches,
        "call_us": e.call_us,
        "syncs": e.syncs,
        "call_ratio": ratio,
        "call_us_applied": (
            "ratio to the reference's call, on each call's time in this trace"
            if ratio is not None
            else "as measured"
            if e.call_us is not None
            else None
        ),
        "call_kind": kinds[0] if len(kinds) == 1 else kinds,
        "calls": len(calls),
        "calls_per_step": len(calls) / steps,
        "kernels_per_call": float(np.median(kernels)) if len(kernels) else 0.0,
        "changed_calls": sum(1 for ch in est if not ch.graph),
        "blocked_calls": len(blocked),
        "removed_cpu_us": float(sum(ch.removed_us for ch in est)),
        "added_cpu_us": float(sum(ch.added_us for ch in est)),
        "added_cpu_us_high": float(sum(ch.added_us for ch in by_bound["high"])),
        "launch_cost": plain(cost) if cost else None,
        "replayed_kernels": in_graph,
        "graph_calls": len(in_graph_calls),
        "graph_nodes_removed": int(sum(max(ch.call.kernels - ch.launches, 0) for ch in graph)),
        "graph_nodes_added": int(sum(max(ch.launches - ch.call.kernels, 0) for ch in graph)),
        "breaks_capture": bool(in_graph and e.syncs),
    }
    return info, by_bound, warnings


def cpu_trace_call_time(
    b: Baseline, res: Resolution, problems: ProblemMap, entries: list[EntryResult]
) -> tuple[float, float] | None:
    """cpu-ops traces: each entry's calls as CPU ranges (the first entry owns a range both name); the
    inclusive time of all of them and the time their speedups save. None when no entry names a range."""
    side = cpu_side(b)
    claimed: list[tuple[float, float, str, str]] = []
    total = saved = 0.0
    found = False
    for m, d in zip(res.matches, entries):
        calls = cpu_trace_calls(b, side, m.entry.selector, problems)
        mine = [
            c
            for c in calls
            if not any(c.pid == p and c.tid == t and c.start < z and a < c.end for a, z, p, t in claimed)
        ]
        claimed += [(c.start, c.end, c.pid, c.tid) for c in mine]
        us = float(sum(c.end - c.start for c in mine))
        d.cpu = {
            "call_kind": sorted({c.kind for c in mine}),
            "calls": len(mine),
            "calls_per_step": len(mine) / max(b.num_steps, 1),
            "call_us": us,
        }
        found = found or bool(mine)
        total += us
        saved += us * (1.0 - 1.0 / m.entry.speedup)
    return (total, saved) if found else None
