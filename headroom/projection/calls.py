"""Which call each selected kernel belongs to: the calls a speedup entry replaces, found on the CPU
timeline (``find_calls``; on a CPU-only trace, ``cpu_trace_calls``), and each call's CPU footprint.

What a call and a footprint are: ``projection.cpu``'s docstring and docs/projection.md, "Calls".
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from headroom.projection.baseline import Baseline
from headroom.projection.cpu import GROUPING_KINDS, Call, CpuSide, text_keys, top_level
from headroom.projection.matching import label_predicate, select
from headroom.projection.problems import ProblemMap
from headroom.projection.selectors import Selector
from headroom.trace.intervals import containing_range
from headroom.trace.modules import nesting_paths
from headroom.trace.ranges import MODULE_PREFIX, MODULE_RANGE_PREFIX

# --- which call each selected kernel belongs to -------------------------------


def _grouping(sel: Selector) -> tuple[str, str]:
    """(kind, pattern) a selector's calls are grouped by: its first module, annotation or op atom, else kernels."""
    for kind in GROUPING_KINDS:
        for a in sel.atoms:
            if a.field == kind and not a.negate:
                return kind, a.pattern
    return "kernel", ""


def event_groupings(
    ev: pd.DataFrame, idx: np.ndarray, selector: Selector, problems: ProblemMap
) -> list[tuple[str, str]]:
    """Which grouping each selected event (idx) uses: the selector's, or for a problem the first of its
    selectors that picks the event."""
    grouping = [_grouping(selector)] * len(idx)
    atom = next((a for a in selector.atoms if a.field == "problem" and not a.negate), None)
    if atom is not None and len(idx):
        grouping = [("kernel", "")] * len(idx)
        todo = np.ones(len(idx), dtype=bool)
        for s in problems.get(atom.pattern).selectors:
            hit = select(ev.iloc[idx], s, problems) & todo
            for i in np.flatnonzero(hit).tolist():
                grouping[i] = _grouping(s)
            todo &= ~hit
    return grouping


_MODULE_RANGE = re.compile(r"^(?P<path>.*) \((?P<cls>[^()]*)\)$")  # headroom/module <path> (<Class>)


def _range_table(side: CpuSide, kind: str) -> pd.DataFrame:
    """The CPU ranges of a kind, with the labels a selector of that kind matches: `label` (an op's or
    annotation's name, a module's path) and `label2` (a module's class, else "")."""
    r = side.ranges
    if kind == "op":
        out = r[r["op"].to_numpy()].copy()
        return out.assign(label=out["name"], label2="")
    if kind == "annotation":
        out = r[(r["cat"] == "user_annotation").to_numpy()].copy()
        return out.assign(label=out["name"], label2="")
    # Modules: torch.profiler's `nn.Module: <Class>_<n>` events (nested into paths), and headroom's
    # `headroom/module <path> (<Class>)` ranges (any category; `headroom/module <name>` without a class).
    names = r["name"].astype(str)
    py = r[(r["cat"] == "python_function").to_numpy() & names.str.startswith(MODULE_PREFIX).to_numpy()]
    parts = []
    if len(py):
        levels = py["name"].astype(str).str.slice(len(MODULE_PREFIX)).to_numpy(dtype=object)
        paths = nesting_paths(py.assign(dur=py["end"] - py["ts"]), levels)
        classes = py["name"].str.slice(len(MODULE_PREFIX)).str.replace(r"_\d+$", "", regex=True)
        parts.append(py.assign(label=paths, label2=classes.to_numpy()))
    hm = r[names.str.startswith(MODULE_RANGE_PREFIX).to_numpy()]
    if len(hm):
        body = hm["name"].str.slice(len(MODULE_RANGE_PREFIX))
        m = body.str.extract(_MODULE_RANGE)
        parts.append(hm.assign(label=m["path"].fillna(body).to_numpy(), label2=m["cls"].fillna("").to_numpy()))
    if not parts:
        return r.iloc[0:0].assign(label=pd.Series(dtype=object), label2=pd.Series(dtype=object))
    return pd.concat(parts).sort_values("ts", kind="stable")


def _matching(table: pd.DataFrame, kind: str, pattern: str) -> np.ndarray:
    """Rows of a range table whose label (or, for modules, class) the selector atom matches."""
    match = label_predicate(kind, pattern)
    return np.fromiter(
        (
            match(str(a)) or (b != "" and match(str(b)))
            for a, b in zip(table["label"].tolist(), table["label2"].tolist())
        ),
        dtype=bool,
        count=len(table),
    )


def _assign_ranges(ev: pd.DataFrame, idx: np.ndarray, table: pd.DataFrame, kind: str, pattern: str) -> np.ndarray:
    """For each selected event (idx), the row of `table` holding its call (-1: none on its thread)."""
    out = np.full(len(idx), -1, dtype=np.int64)
    if len(table) == 0 or len(idx) == 0:
        return out
    ok = _matching(table, kind, pattern)
    t = table[ok]
    tpos = np.flatnonzero(ok)
    if len(t) == 0:
        return out
    pid = text_keys(ev, "launch_pid")[idx]
    tid = text_keys(ev, "launch_tid")[idx]
    pts = ev["launch_ts"].to_numpy(dtype=float)[idx]
    groups = t.groupby(["pid", "tid"], sort=False).indices
    keys = pd.Series(list(zip(pid, tid)))
    for key, pidx in keys.groupby(keys, sort=False).indices.items():
        ridx = groups.get(key)
        if ridx is None:
            continue
        sub = t.iloc[ridx]
        hit = containing_range(sub["ts"].to_numpy(), sub["end"].to_numpy(), pts[pidx], outermost=kind != "annotation")
        good = hit >= 0
        out[pidx[good]] = tpos[ridx[hit[good]]]
    return out


def replayed_from_graph(ev: pd.DataFrame) -> np.ndarray:
    """Which events a CUDA graph replayed (headroom/trace/graphs.py: the `graph` column)."""
    if "graph" not in ev.columns:
        return np.zeros(len(ev), dtype=bool)
    return ev["graph"].to_numpy(dtype=object) != ""


def find_calls(
    b: Baseline, side: CpuSide, selector: Selector, mask: np.ndarray, problems: ProblemMap
) -> tuple[list[Call], list[str]]:
    """The calls of the selected events (`mask`), with their CPU footprints."""
    ev = b.events
    warnings: list[str] = []
    launched = ev["launch_ts"].notna().to_numpy() if "launch_ts" in ev.columns else np.zeros(len(ev), dtype=bool)
    replayed = replayed_from_graph(ev)
    if (mask & replayed).any():
        warnings.append(
            f"{selector}: {int((mask & replayed).sum())} selected kernel(s) were replayed from a CUDA "
            f"graph: they have no CPU launch of their own, so only their GPU time and their graph nodes' "
            f"gaps change (a change of launches per call saves or costs no CPU time inside a graph)"
        )
    sel_idx = np.flatnonzero(mask & launched & ~replayed)
    if (mask & ~launched).any():
        warnings.append(
            f"{selector}: {int((mask & ~launched).sum())} selected event(s) have no launch in the "
            f"trace; their CPU side is not modelled"
        )
    grouping = event_groupings(ev, sel_idx, selector, problems)
    calls: list[Call] = []
    kinds = ev["kind"].astype(str).to_numpy() if "kind" in ev.columns else np.full(len(ev), "kernel")
    lts = ev["launch_ts"].to_numpy(dtype=float)
    ldur = ev["launch_dur"].to_numpy(dtype=float) if "launch_dur" in ev.columns else np.zeros(len(ev))
    pids, tids = text_keys(ev, "launch_pid"), text_keys(ev, "launch_tid")
    no_range = 0
    tables: dict[str, pd.DataFrame] = {}
    for g in dict.fromkeys(grouping):
        kind, pattern = g
        gi = sel_idx[np.array([x == g for x in grouping], dtype=bool)]
        rows = np.full(len(gi), -1, dtype=np.int64)
        if kind != "kernel":
            table = tables.setdefault(kind, _range_table(side, kind))
            rows = _assign_ranges(ev, gi, table, kind, pattern)
        no_range += int((rows < 0).sum()) if kind != "kernel" else 0
        for r in np.unique(rows[rows >= 0]):
            members = gi[rows == r]
            members = members[np.argsort(lts[members], kind="stable")]
            row = tables[kind].iloc[int(r)]
            calls.append(
                Call(
                    str(row["pid"]),
                    str(row["tid"]),
                    kind,
                    str(row["label"]),
                    float(row["ts"]),
                    float(row["end"]),
                    members,
                    int((kinds[members] == "kernel").sum()),
                )
            )
        for i in gi[rows < 0]:
            calls.append(
                Call(
                    pids[i],
                    tids[i],
                    "kernel",
                    str(ev["name"].iat[i]),
                    float(lts[i]),
                    float(lts[i] + ldur[i]),
                    np.array([i]),
                    int(kinds[i] == "kernel"),
                    orphan=kind != "kernel",
                )
            )
    if no_range:
        ranges = "/".join(sorted({g[0] for g in grouping} - {"kernel"}))
        warnings.append(
            f"{selector}: {no_range} selected kernel(s) have no {ranges} "
            f"range on their launching thread (autograd's backward thread launches outside every range); "
            f"their launches stay as traced"
        )
    selected_corr = set(ev["correlation"].to_numpy()[mask].tolist()) if "correlation" in ev.columns else set()
    _footprints(calls, side, selected_corr, lts, ldur)
    calls.sort(key=lambda c: (c.start, c.pid, c.tid))
    return calls, warnings


def _footprints(calls: list[Call], side: CpuSide, selected_corr: set, lts: np.ndarray, ldur: np.ndarray) -> None:
    """Each call's CPU footprint: the range if it launches only selected work, else its single-purpose ops."""
    la = side.launches
    by_thread_l = la.groupby(["pid", "tid"], sort=False).indices
    ops = side.ranges[side.ranges["op"].to_numpy()]
    by_thread_o = ops.groupby(["pid", "tid"], sort=False).indices
    blk = side.blocking.groupby(["pid", "tid"], sort=False).indices
    cache: dict = {}
    for c in calls:
        key = (c.pid, c.tid)
        if key not in cache:
            li = by_thread_l.get(key, np.zeros(0, dtype=np.int64))
            sub = la.iloc[li]
            order = np.argsort(sub["ts"].to_numpy(), kind="stable")
            lt = sub["ts"].to_numpy()[order]
            other = ~np.fromiter(
                (x in selected_corr for x in sub["correlation"].to_numpy()[order].tolist()),
                dtype=bool,
                count=len(order),
            )
            csum = np.concatenate([[0], np.cumsum(other)])
            oi = by_thread_o.get(key, np.zeros(0, dtype=np.int64))
            o = ops.iloc[oi].sort_values(["ts", "end"], ascending=[True, False], kind="stable")
            bi = blk.get(key, np.zeros(0, dtype=np.int64))
            b = side.blocking.iloc[bi]
            cache[key] = (
                lt,
                csum,
                o["ts"].to_numpy(),
                o["end"].to_numpy(),
                b["ts"].to_numpy(),
                b["end"].to_numpy(),
                b["name"].astype(str).to_numpy(dtype=object),
            )
        lt, csum, ots, oend, bts, bend, bname = cache[key]

        def foreign(a: float, z: float) -> int:
            return int(csum[np.searchsorted(lt, z, "right")] - csum[np.searchsorted(lt, a, "left")])

        if c.kind != "kernel" and foreign(c.start, c.end) == 0:
            pieces = [(c.start, c.end)]
        else:
            pieces = []
            inside = (ots >= c.start) & (oend <= c.end) if c.kind != "kernel" else np.ones(len(ots), dtype=bool)
            for i in c.events.tolist():
                lt_i = float(lts[i])
                cand = np.flatnonzero(inside & (ots <= lt_i) & (oend >= lt_i))
                best = None
                for k in cand:  # outermost first: earliest start, then longest
                    if foreign(ots[k], oend[k]) == 0 and (
                        best is None or ots[k] < ots[best] or (ots[k] == ots[best] and oend[k] > oend[best])
                    ):
                        best = k
                if best is not None:
                    pieces.append((float(ots[best]), float(oend[best])))
                else:
                    pieces.append((lt_i, lt_i + float(ldur[i])))
            pieces = _merge(pieces)
        c.pieces = pieces
        c.records = sum(side.count_records(c.pid, c.tid, a, z) for a, z in pieces)
        for a, z in pieces:
            hit = np.flatnonzero((bts < z) & (bend > a))
            if len(hit):
                c.blocked = str(bname[hit[0]])
                break


def _merge(pieces: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, z in sorted(pieces):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], z))
        else:
            out.append((a, z))
    return out


# --- CPU-only traces ------------------------------------------------------------


def cpu_trace_calls(b: Baseline, side: CpuSide, selector: Selector, problems: ProblemMap) -> list[Call]:
    """In a trace without GPU work: the calls a selector names, as CPU ranges (outermost, in the window).

    The CPU timeline is then the whole step: a call that takes less time moves everything after it
    earlier and nothing waits, so the saving is the calls' inclusive CPU time times (1 - 1/speedup).
    Kernel/category selectors have no calls here (they select op self times: Amdahl).
    """
    sels = [selector]
    atom = next((a for a in selector.atoms if a.field == "problem" and not a.negate), None)
    if atom is not None:
        sels = list(problems.get(atom.pattern).selectors)
    w0, w1 = b.window
    out: list[Call] = []
    for s in sels:
        kind, pattern = _grouping(s)
        if kind == "kernel":
            continue
        t = _range_table(side, kind)
        if len(t) == 0:
            continue
        t = t[_matching(t, kind, pattern) & (t["ts"] >= w0).to_numpy() & (t["end"] <= w1).to_numpy()]
        for key, idx in t.groupby(["pid", "tid"], sort=False).indices.items():
            sub = t.iloc[idx].sort_values(["ts", "end"], ascending=[True, False], kind="stable")
            top = top_level(sub["ts"].to_numpy(), sub["end"].to_numpy())
            for r in sub[top].itertuples(index=False):
                out.append(
                    Call(
                        str(key[0]),
                        str(key[1]),
                        kind,
                        str(r.label),
                        float(r.ts),
                        float(r.end),
                        np.zeros(0, dtype=np.int64),
                        0,
                        [(float(r.ts), float(r.end))],
                    )
                )
    out.sort(key=lambda c: (c.start, c.pid, c.tid))
    return out
