"""Kernels replayed from CUDA graphs, given the context of the launch that made their node.

A graph replay is one `cudaGraphLaunch` call: every kernel, copy and fill it runs carries that call's
correlation id, and none names the op, module or phase that made it (torch 2.11's trace exports no
graph node id). That context exists where the graph was made, and is found in one of two places:

- **a stream capture in the trace** (`cudaStreamBeginCapture` ... `cudaStreamEndCapture` on one thread,
  recorded with the profiler on: `headroom profile --graphs` does so). The work calls between them that
  ran nothing are the graph's nodes, in order, each under its own op, module ranges and phase. A replay
  with as many GPU activities takes them in order (GPU start order: one stream, one chain). The order is
  checked by kernel name: where a node's op also ran eagerly (in this trace or the source trace), the
  replayed kernel's name must be one that op launched there; more than `max_disagreement` of the checked
  nodes disagreeing rejects the capture for that replay.
- **a source trace of the same step** (run eagerly, or holding its own capture; `--graph-source`): the
  replay's kernel names are aligned with one of its steps' (the step closest in kernel count) by
  difflib's matching blocks, and each matched kernel takes its match's context.

The `graph` column says how each replayed activity got its context: "capture", "source", "kernel name"
(no node, but a kernel Inductor names, `triton_poi_fused_...`, is its own op: the name Inductor's
launcher records as the op when it runs without a graph; no module), or "unmatched" (op left empty:
`(no op)` in targets); "" for activities launched on their own. `graph_check` says, for those given a
capture's node, whether the kernel name is one the node's op launched eagerly (1), is not (0), or could
not be checked (-1).
`graph_summary` counts them for the analysis's notes. Patterns are data: headroom/data/graphs.toml.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headroom.datafiles import shipped
from headroom.trace.codes import factorized
from headroom.trace.context import CONTEXT_COLUMNS, launch_context
from headroom.trace.tables import Trace

__all__ = [
    "GraphSummary",
    "attribute_replays",
    "capture_templates",
    "capture_trace_of",
    "graph_summary",
    "is_graph_launch",
]

CAPTURE, SOURCE, KERNEL_NAME, UNMATCHED = "capture", "source", "kernel name", "unmatched"


@dataclass(frozen=True)
class _Patterns:
    graph_launch: re.Pattern
    capture_begin: re.Pattern
    capture_end: re.Pattern
    work_call: re.Pattern
    named_kernel: re.Pattern
    max_disagreement: float


@lru_cache(maxsize=1)
def _patterns() -> _Patterns:
    doc = shipped("graphs.toml")
    rx = {k: re.compile(doc[k]) for k in ("graph_launch", "capture_begin", "capture_end", "work_call", "named_kernel")}
    return _Patterns(**rx, max_disagreement=float(doc["max_disagreement"]))


def _matching(names: pd.Series | np.ndarray, rx: re.Pattern) -> np.ndarray:
    """Boolean mask: the names `rx` matches (evaluated once per distinct name)."""
    codes, uniques = factorized(np.asarray(names, dtype=object))
    if not len(codes):
        return np.zeros(0, dtype=bool)
    hit = np.array([isinstance(u, str) and rx.search(u) is not None for u in uniques] + [False], dtype=bool)
    return hit[np.where(codes < 0, len(uniques), codes)]


def is_graph_launch(names: pd.Series | np.ndarray) -> np.ndarray:
    """Which launch-call names replay a graph (cudaGraphLaunch and its driver/HIP relatives)."""
    return _matching(names, _patterns().graph_launch)


@dataclass(frozen=True)
class Template:
    """A sequence of launches with their context: one captured graph's nodes (names unknown), or one
    eagerly run step's GPU activities (with their kernel names)."""

    context: dict[str, np.ndarray]  # CONTEXT_COLUMNS, one value per node
    names: np.ndarray | None  # kernel names, where known
    origin: str  # CAPTURE or SOURCE
    start: float  # when the capture began (source steps: -inf)

    def __len__(self) -> int:
        return len(self.context["op"])


def capture_templates(trace: Trace) -> list[Template]:
    """Every stream capture recorded in the trace, as the graph's nodes in order with their context."""
    p = _patterns()
    calls = trace.launches
    if not len(calls):
        return []
    names = calls["name"].astype(str).to_numpy(dtype=object)
    begin, end, work = (_matching(names, rx) for rx in (p.capture_begin, p.capture_end, p.work_call))
    if not begin.any():
        return []
    ran = set(trace.gpu["correlation"].tolist())
    captured = work & ~np.isin(calls["correlation"].to_numpy(), list(ran))
    ts = calls["ts"].to_numpy(dtype=float)
    thread = calls["pid"].astype(str).to_numpy(dtype=object) + "/" + calls["tid"].astype(str).to_numpy(dtype=object)
    out = []
    for b in np.flatnonzero(begin)[np.argsort(ts[begin], kind="stable")]:
        same = thread == thread[b]
        later_end = np.flatnonzero(end & same & (ts > ts[b]))
        stop = ts[later_end].min() if len(later_end) else np.inf
        nodes = np.flatnonzero(captured & same & (ts > ts[b]) & (ts < stop))
        nodes = nodes[np.argsort(ts[nodes], kind="stable")]
        if not len(nodes):
            continue
        rows = calls.iloc[nodes]
        context = launch_context(
            trace, rows["pid"], rows["tid"], ts[nodes], rows["external_id"].to_numpy(), np.ones(len(nodes), dtype=bool)
        )
        out.append(Template(context, None, CAPTURE, float(ts[b])))
    return out


def source_templates(source: pd.DataFrame) -> list[Template]:
    """A source trace's steps (its attributed GPU activities, `attribute_kernels_to_ops`) as templates:
    each step's activities launched on their own, in GPU start order."""
    own = source[(source["graph"] == "").to_numpy() & (source["step"] >= 0).to_numpy()]
    out = []
    for _, rows in own.groupby("step", sort=True):
        rows = rows.sort_values(["ts", "index"] if "index" in rows else ["ts"], kind="stable")
        out.append(
            Template(
                {k: rows[k].to_numpy(dtype=object) for k in CONTEXT_COLUMNS},
                rows["name"].to_numpy(dtype=object),
                SOURCE,
                -np.inf,
            )
        )
    return out


# A kernel's family: its name without the argument list, element types and numbers (vector widths, tile sizes).
# The same op launches one family whatever the dtype (a causal mask filled in bf16 under capture, in int64 eagerly).
_TYPES = re.compile(
    r"\b(c10::(BFloat16|Half|complex<[^>]*>)|float|double|long|int|short|bool|unsigned|signed|char|"
    r"__nv_bfloat16|__half|u?int\d+_t)\b"
)
_NUMBERS = re.compile(r"\d+")


def _without_arguments(name: str) -> str:
    """`name` less a trailing parenthesised argument list (`kernel<...>(int, ...)` -> `kernel<...>`)."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i].rstrip()
    return name


@lru_cache(maxsize=1 << 14)
def kernel_family(name: str) -> str:
    """`name` with its argument list, element types and numbers left out (the name check compares families;
    cached: a trace repeats a few hundred names over thousands of kernels)."""
    return _NUMBERS.sub("#", _TYPES.sub("T", _without_arguments(name)))


def _eager_names(*frames: pd.DataFrame | None) -> dict[str, set[str]]:
    """op -> the kernel families it launched on its own (not from a graph), over the given attributed frames."""
    out: dict[str, set[str]] = {}
    for f in frames:
        if f is None or not len(f):
            continue
        own = f[(f["graph"] == "").to_numpy() & (f["op"] != "").to_numpy()] if "graph" in f else f[f["op"] != ""]
        for op, name in zip(own["op"].tolist(), own["name"].tolist()):
            out.setdefault(op, set()).add(kernel_family(name))
    return out


def _capture_agrees(t: Template, names: np.ndarray, eager: dict[str, set[str]], limit: float) -> bool:
    ops = t.context["op"]
    checked = [i for i, op in enumerate(ops) if op in eager]
    wrong = sum(1 for i in checked if kernel_family(names[i]) not in eager[ops[i]])
    return not checked or wrong <= limit * len(checked)


def _pick_capture(
    captures: list[Template], names: np.ndarray, launched_at: float, eager: dict[str, set[str]], limit: float
) -> Template | None:
    """The capture a replay ran: as many nodes as the replay has activities, its names agreeing; the
    latest one made before the replay's launch (a graph is replayed after it is captured)."""
    fits = [t for t in captures if len(t) == len(names) and _capture_agrees(t, names, eager, limit)]
    before = [t for t in fits if t.start <= launched_at]
    pool = before or fits
    return max(pool, key=lambda t: t.start) if pool else None


def _align(template: Template, names: np.ndarray) -> np.ndarray:
    """For each replayed activity, the position of its match in the template (-1: none)."""
    assert template.names is not None
    if len(template) == len(names) and bool((template.names == names).all()):
        return np.arange(len(names))
    out = np.full(len(names), -1, dtype=np.int64)
    matcher = difflib.SequenceMatcher(None, names.tolist(), template.names.tolist(), autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        out[a : a + size] = np.arange(b, b + size)
    return out


def _best_source(sources: list[Template], n: int) -> Template | None:
    return min(sources, key=lambda t: (abs(len(t) - n), -len(t))) if sources else None


def attribute_replays(
    gpu: pd.DataFrame, trace: Trace, source: pd.DataFrame | None = None, source_trace: Trace | None = None
) -> pd.DataFrame:
    """`gpu` (attributed GPU activities with launch_name, launch_ts, correlation) with every replayed
    activity given the context of its node, and the `graph` column. `source`/`source_trace`: another
    trace of the same step, attributed and as loaded (its steps and captures are templates too)."""
    gpu["graph"] = ""
    gpu["graph_check"] = np.full(len(gpu), -1, dtype=np.int8)
    replayed = is_graph_launch(gpu["launch_name"]) if len(gpu) else np.zeros(0, dtype=bool)
    if not replayed.any():
        return gpu
    p = _patterns()
    captures = capture_templates(trace) + (capture_templates(source_trace) if source_trace is not None else [])
    sources = source_templates(source) if source is not None else []
    eager = _eager_names(gpu[~replayed], source)
    rows = np.flatnonzero(replayed)
    order = np.lexsort(
        (
            gpu["index"].to_numpy()[rows] if "index" in gpu else rows,
            gpu["ts"].to_numpy()[rows],
            pd.factorize(gpu["correlation"].to_numpy()[rows])[0],
        )
    )
    rows = rows[order]
    corr = gpu["correlation"].to_numpy()[rows]
    cuts = np.flatnonzero(corr[1:] != corr[:-1]) + 1
    names_all = gpu["name"].to_numpy(dtype=object)
    launch_ts = gpu["launch_ts"].to_numpy(dtype=float)
    graph = np.full(len(gpu), "", dtype=object)
    checked = np.full(len(gpu), -1, dtype=np.int8)
    columns = {k: gpu[k].to_numpy(dtype=object).copy() for k in CONTEXT_COLUMNS}
    memo: dict[tuple, tuple[Template | None, np.ndarray, str]] = {}
    for part in np.split(rows, cuts):
        names = names_all[part]
        key = (tuple(names.tolist()), float(launch_ts[part[0]]) if len(captures) > 1 else 0.0)
        if key not in memo:
            t = _pick_capture(captures, names, float(launch_ts[part[0]]), eager, p.max_disagreement)
            if t is not None:
                memo[key] = (t, np.arange(len(part)), CAPTURE)
            else:
                s = _best_source(sources, len(part))
                memo[key] = (s, _align(s, names), SOURCE) if s is not None else (None, np.full(len(part), -1), "")
        t, at, origin = memo[key]
        hit = at >= 0
        graph[part] = np.where(hit, origin, UNMATCHED)
        if t is None:
            continue
        for k in CONTEXT_COLUMNS:
            columns[k][part[hit]] = t.context[k][at[hit]]
        if origin == CAPTURE:
            checked[part] = _name_checks(columns["op"][part], names, eager, hit)
    # A replayed activity without a node keeps no op: the graph launch's op says nothing of what made it;
    # but a kernel that Inductor names (triton_poi_fused_...) is its own op, as Inductor's launcher records it.
    lost = graph == UNMATCHED
    own = lost & _matching(names_all, p.named_kernel)
    graph[own] = KERNEL_NAME
    columns["op"][own] = names_all[own]
    columns["op"][lost & ~own] = ""
    for k in CONTEXT_COLUMNS:
        gpu[k] = columns[k]
    gpu["graph"] = graph
    gpu["graph_check"] = checked
    return gpu


def _name_checks(ops: np.ndarray, names: np.ndarray, eager: dict[str, set[str]], hit: np.ndarray) -> np.ndarray:
    """Per replayed activity given a node: 1 if its kernel's family is one its op launched eagerly, 0 if not,
    -1 where the op never ran eagerly (or no node was given)."""
    out = np.full(len(names), -1, dtype=np.int8)
    for i in np.flatnonzero(hit):
        seen = eager.get(ops[i])
        if seen is not None:
            out[i] = 1 if kernel_family(names[i]) in seen else 0
    return out


@dataclass(frozen=True)
class GraphSummary:
    """How the replayed GPU activities of an analysed span got their context."""

    replays: int
    activities: int
    us: float
    by_origin: dict[str, tuple[int, float]]  # origin -> (activities, us)
    checked: int  # given a node whose op also ran eagerly: name checked
    differ: int  # of those, kernel names the op never launched eagerly

    def note(self) -> str:
        how = {
            CAPTURE: "from the capture",
            SOURCE: "from the source trace",
            KERNEL_NAME: "named by their kernel",
            UNMATCHED: "without a node",
        }
        parts = [
            f"{n:,} {how[o]} ({us / self.us:.1%} of their time)"
            for o, (n, us) in self.by_origin.items()
            if n and self.us > 0
        ]
        text = (
            f"{self.replays:,} CUDA graph replay(s), {self.activities:,} GPU activities: "
            f"{'; '.join(parts) if parts else 'none attributed'}"
        )
        if self.checked:
            text += f"; kernel names checked on {self.checked:,}, {self.differ:,} differ"
        lost = self.by_origin.get(UNMATCHED, (0, 0.0))
        if lost[0]:
            text += (
                " (no op: record the capture under the profiler, as `headroom profile --graphs` does, or "
                "pass --graph-source TRACE, a trace of the same step run eagerly)"
            )
        return text


def graph_summary(events: pd.DataFrame) -> GraphSummary | None:
    """Counts of the replayed activities in `events` by how they got their context; None if none replayed."""
    if "graph" not in events or not len(events):
        return None
    graph = events["graph"].to_numpy(dtype=object)
    replayed = graph != ""
    if not replayed.any():
        return None
    dur = events["dur"].to_numpy(dtype=float)
    by = {o: (int((graph == o).sum()), float(dur[graph == o].sum())) for o in (CAPTURE, SOURCE, KERNEL_NAME, UNMATCHED)}
    check = events["graph_check"].to_numpy() if "graph_check" in events else np.full(len(events), -1)
    return GraphSummary(
        int(pd.unique(events["correlation"].to_numpy()[replayed]).size),
        int(replayed.sum()),
        float(dur[replayed].sum()),
        {o: v for o, v in by.items() if v[0]},
        int((check[replayed] >= 0).sum()),
        int((check[replayed] == 0).sum()),
    )


def capture_trace_of(trace_path: str | Path, metadata: dict[str, Any]) -> Path | None:
    """The capture trace that a `headroom profile --graphs` trace names in its manifest (`graphs.capture_trace`,
    relative to the trace's directory); None if it names none."""
    manifest = metadata.get("headroom") if isinstance(metadata, dict) else None
    graphs = manifest.get("graphs") if isinstance(manifest, dict) else None
    name = graphs.get("capture_trace") if isinstance(graphs, dict) else None
    if not isinstance(name, str) or not name:
        return None
    return Path(trace_path).parent / name
