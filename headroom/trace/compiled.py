"""torch.compile'd code by module: Inductor's kernels and extern ops given the module of the nodes they ran.

Module ranges do nothing inside compiled code. `headroom profile --compile` records, per post-grad graph
Inductor compiled, each node's module (headroom/profile/compiled.py; the manifest's `compiled_modules`),
and names each generated kernel after its nodes. Here, for the work of a compiled call:

- **an Inductor kernel** (`triton_red_fused_mean_2_pow_3_add_12_4`, `graph_0_cpp_fused_..._0`; the pattern
  is headroom/data/compiled.toml's `kernel_name`): its name is split into node names (known names of one
  graph, matched as `_`-bounded runs, longest first; the graph matching most of the name is taken). The
  nodes that decide are those that compute (not views: Inductor folds them into indexing) and that no
  other kernel of the graph lists (Inductor recomputes a cheap producer in each consumer: the embedding
  lookup and residual adds appear in every norm's kernel on a CPU); failing those, every computing node,
  then every node. The kernel's module is the deepest module holding all deciding nodes: a kernel fusing
  the residual add of layer 3 with the norm of layer 4 goes to their common ancestor (the decoder).
- **an extern op** (aten::mm, aten::_scaled_dot_product_*: `extern_op`) inside one call of a compiled
  graph (a `## Call CompiledFxGraph` range): the k-th op of each name in the call is the graph's k-th
  extern node of that name (for the names the call runs as often as the graph has such nodes: an
  index_put Inductor lowered into a kernel runs no op). Where the trace recorded
  input shapes, each op's are checked against its node's; a graph whose checked ops disagree in more than
  `max_disagreement` of cases gets no extern module at all (not a wrong one).
- **the rest of the call** (the wrapper's allocations, graph trees' input copies, a kernel no node
  names) and of Dynamo's region around it (`Torch-Compiled Region: 0/0`, for the frames whose graphs were
  recorded): the compiled module itself.

Paths: a node's path is below the compiled object; with no module range around the call it goes below
the manifest's `root` (`model`, the whole model compiled), inside a module range of the compiled object's
class (a block whose forward is compiled, `--layers`) below that range's path. `CompiledSummary` counts
how the work of compiled calls got its module, for the analysis's notes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headroom.datafiles import shipped
from headroom.trace.intervals import ranges_on_threads
from headroom.trace.modules import STACK_SEP
from headroom.trace.op_inputs import op_calls
from headroom.trace.tables import Trace

__all__ = [
    "BY_NODES",
    "BY_ORDER",
    "BY_REGION",
    "REJECTED",
    "UNMAPPED",
    "CompiledMap",
    "CompiledSummary",
    "common_path",
    "compiled_map",
    "compiled_summary",
    "fill_compiled",
    "kernel_paths",
    "match_call",
    "node_tokens",
]

# How a point of compiled work got its module (the `compiled` column; "" outside compiled code).
BY_NODES, BY_ORDER, BY_REGION, UNMAPPED = "kernel nodes", "extern order", "compiled module", "unmapped"
# An extern op of a graph whose order of extern ops the recorded shapes contradict: the compiled module.
REJECTED = "compiled module (extern order rejected)"


@dataclass(frozen=True)
class _Patterns:
    kernel_name: re.Pattern
    extern_op: re.Pattern
    call_range: re.Pattern
    region_range: re.Pattern
    max_disagreement: float


@lru_cache(maxsize=1)
def _patterns() -> _Patterns:
    doc = shipped("compiled.toml")
    rx = {k: re.compile(doc[k]) for k in ("kernel_name", "extern_op", "call_range", "region_range")}
    return _Patterns(**rx, max_disagreement=float(doc["max_disagreement"]))


@dataclass(frozen=True)
class Graph:
    """One recorded post-grad graph (headroom/profile/compiled.py `graph_record`)."""

    compile_id: str  # Dynamo's frame/compile id ("0/0"; "" where not known)
    paths: tuple[str, ...]  # module paths below the compiled object ("" is the object)
    types: tuple[str, ...]
    nodes: dict[str, int]  # node name -> module index (-1: none)
    views: frozenset[str]
    externs: tuple[tuple[str, str, tuple], ...]  # (node, op, input shapes by position)

    @property
    def root_type(self) -> str:
        return self.types[self.paths.index("")] if "" in self.paths else ""

    def stack(self, path: str) -> list[str]:
        """Classes of `path` and of every recorded module above it, outermost first."""
        type_of = dict(zip(self.paths, self.types))
        parts = path.split(".") if path else []
        prefixes = [""] + [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        return [type_of[p] for p in prefixes if p in type_of]


@dataclass(frozen=True)
class CompiledMap:
    root: str  # the compiled object's path where no module range holds its calls ("": a range)
    root_type: str  # its class
    graphs: tuple[Graph, ...]


def _graph(g: dict[str, Any]) -> Graph:
    mods = [m for m in g.get("modules", []) if isinstance(m, list) and len(m) == 2]
    nodes = {str(k): int(v) for k, v in (g.get("nodes") or {}).items() if isinstance(v, int)}
    externs = tuple(
        (str(e[0]), str(e[1]), tuple(tuple(s) if isinstance(s, list) else None for s in e[2]))
        for e in g.get("externs", [])
        if isinstance(e, list) and len(e) == 3 and isinstance(e[2], list)
    )
    return Graph(
        str(g.get("compile_id") or ""),
        tuple(str(m[0]) for m in mods),
        tuple(str(m[1]) for m in mods),
        nodes,
        frozenset(str(v) for v in g.get("views", [])),
        externs,
    )


def compiled_map(metadata: dict[str, Any]) -> CompiledMap | None:
    """The manifest's `compiled_modules` (headroom/profile/compiled.py), or None if the trace has none."""
    m = metadata.get("headroom") if isinstance(metadata, dict) else None
    c = m.get("compiled_modules") if isinstance(m, dict) else None
    if not isinstance(c, dict) or not isinstance(c.get("graphs"), list) or not c["graphs"]:
        return None
    return CompiledMap(
        str(c.get("root") or ""),
        str(c.get("root_type") or ""),
        tuple(_graph(g) for g in c["graphs"] if isinstance(g, dict)),
    )


def node_tokens(fused: str, nodes: dict[str, int] | set[str] | frozenset[str]) -> list[str]:
    """The known node names in `fused` (node names joined by `_`), matched as `_`-bounded runs, longest
    first from left to right; parts no known name covers are skipped."""
    parts = fused.split("_")
    out: list[str] = []
    i = 0
    while i < len(parts):
        for j in range(len(parts), i, -1):
            name = "_".join(parts[i:j])
            if name in nodes:
                out.append(name)
                i = j
                break
        else:
            i += 1
    return out


def common_path(paths: list[str], known: set[str] | tuple[str, ...]) -> str:
    """The deepest path holding every one of `paths` (dotted, "" the root) that is in `known` (a module
    the graph recorded: `layers` itself, a ModuleList, is not one); "" if none deeper is."""
    if not paths:
        return ""
    split = [p.split(".") if p else [] for p in paths]
    n = 0
    while all(len(s) > n for s in split) and len({s[n] for s in split}) == 1:
        n += 1
    parts = split[0][:n]
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts)


def _deciding(tokens: list[str], g: Graph, shared: dict[str, int]) -> list[str]:
    with_module = [t for t in tokens if g.nodes.get(t, -1) >= 0]
    computing = [t for t in with_module if t not in g.views]
    own = [t for t in computing if shared.get(t, 0) <= 1]
    return own or computing or with_module


@dataclass
class _Kernels:
    """Every Inductor kernel name of a trace, resolved to a path below the compiled object (None: none)."""

    cmap: CompiledMap
    paths: dict[str, tuple[str, Graph] | None] = field(default_factory=dict)

    @classmethod
    def of(cls, cmap: CompiledMap, names: set[str]) -> _Kernels:
        rx = _patterns().kernel_name
        parsed: dict[str, tuple[list[int], list[list[str]]]] = {}
        shared: list[dict[str, int]] = [{} for _ in cmap.graphs]
        for name in names:
            m = rx.search(name)
            if m is None:
                continue
            tokens = [node_tokens(m.group(1), g.nodes) for g in cmap.graphs]
            best = max((sum(len(t) for t in ts) for ts in tokens), default=0)
            chosen = [i for i, ts in enumerate(tokens) if ts and sum(len(t) for t in ts) == best]
            parsed[name] = (chosen, tokens)
            for i in chosen:
                for t in set(tokens[i]):
                    shared[i][t] = shared[i].get(t, 0) + 1
        out = cls(cmap)
        for name, (chosen, tokens) in parsed.items():
            found = [
                (common_path([g.paths[g.nodes[t]] for t in picks], g.paths), g)
                for g, picks in ((cmap.graphs[i], _deciding(tokens[i], cmap.graphs[i], shared[i])) for i in chosen)
                if picks
            ]
            if found:
                path = common_path([p for p, _ in found], found[0][1].paths)
                out.paths[name] = (path, found[0][1])
            else:
                out.paths[name] = None
        return out


def _ranges(trace: Trace, rx: re.Pattern) -> pd.DataFrame:
    cpu = trace.cpu
    hit = cpu["name"].astype(str).map(lambda n: rx.search(n) is not None).to_numpy(dtype=bool)
    return cpu.loc[hit, ["name", "pid", "tid", "ts", "dur"]].reset_index(drop=True)


def kernel_paths(cmap: CompiledMap, names: set[str]) -> dict[str, str | None]:
    """Each Inductor kernel name's module path below the compiled object (None: no node of it is known)."""
    return {n: (v[0] if v is not None else None) for n, v in _Kernels.of(cmap, names).paths.items()}


def _calls(trace: Trace) -> pd.DataFrame:
    """The ranges of compiled calls: Inductor's `## Call CompiledFxGraph` annotations, else Dynamo's regions."""
    p = _patterns()
    calls = _ranges(trace, p.call_range)
    return calls if len(calls) else _ranges(trace, p.region_range)


def _scope(trace: Trace, cmap: CompiledMap, calls: pd.DataFrame) -> pd.DataFrame:
    """The ranges whose work is the compiled object's: its calls, and Dynamo's regions (`Torch-Compiled
    Region: 0/0`: the guards' prologue, the wrapper) of the frames whose graphs were recorded."""
    regions = _ranges(trace, _patterns().region_range)
    ids = {g.compile_id for g in cmap.graphs}
    if "" not in ids:
        regions = regions[regions["name"].map(lambda n: n.rpartition(" ")[2] in ids).to_numpy(dtype=bool)]
    return pd.concat([calls, regions], ignore_index=True).drop_duplicates(["pid", "tid", "ts", "dur"])


def _outermost_externs(trace: Trace, calls: pd.DataFrame) -> pd.DataFrame:
    """The extern ops (by name) in compiled calls, not inside another extern op: name, pid, tid, ts, dur,
    external_id, call (row in `calls`)."""
    ops = trace.cpu_ops()
    rx = _patterns().extern_op
    names = ops["name"].astype(str)
    ext = ops[names.map(lambda n: rx.search(n) is not None).to_numpy(dtype=bool)].reset_index(drop=True)
    ext = ext[["name", "pid", "tid", "ts", "dur", "external_id"]].assign(name=lambda d: d["name"].astype(str))
    if not len(ext) or not len(calls):
        return ext.iloc[:0].assign(call=np.zeros(0, dtype=np.int64))
    holder = ranges_on_threads(ext, ext["pid"], ext["tid"], ext["ts"].to_numpy(dtype=float), outermost=True)
    ext = ext[holder == np.arange(len(ext))].reset_index(drop=True)
    call = ranges_on_threads(calls, ext["pid"], ext["tid"], ext["ts"].to_numpy(dtype=float))
    return ext.assign(call=call)[call >= 0].sort_values(["call", "ts"], kind="stable").reset_index(drop=True)


def _by_name(names: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        out.setdefault(n, []).append(i)
    return out


def match_call(names: list[str], graphs: tuple[Graph, ...]) -> tuple[int, np.ndarray]:
    """The graph one call ran (-1: none) and, per op of the call (in order), its extern node there (-1: none).

    The k-th op of each name is the k-th extern node of that name, for the names the call runs as often as
    the graph has nodes of (a node Inductor lowered into a kernel, an index_put say, runs no op: its name
    is left out); the graph that places the most ops is taken."""
    call = _by_name(names)
    best, best_nodes, best_n = -1, np.full(len(names), -1, dtype=np.int64), 0
    for gi, g in enumerate(graphs):
        nodes = _by_name([op for _, op, _ in g.externs])
        at = np.full(len(names), -1, dtype=np.int64)
        for name, ops in call.items():
            if len(nodes.get(name, ())) == len(ops):
                at[ops] = nodes[name]
        placed = int((at >= 0).sum())
        if placed > best_n:
            best, best_nodes, best_n = gi, at, placed
    return best, best_nodes


def _shapes_agree(call: Any, shapes: tuple) -> bool | None:
    """Whether an op's recorded input shapes are its node's (positions both know); None if none known."""
    seen = False
    for i, s in enumerate(shapes):
        t = call.tensor(i) if call is not None else None
        if s is None or t is None:
            continue
        if tuple(t.shape) != tuple(s):
            return False
        seen = True
    return True if seen else None


@dataclass(frozen=True)
class Externs:
    """The extern ops of compiled calls given their node: rows (pid, tid, ts, dur, path, graph, rejected) and,
    per graph, (checked, disagreeing, rejected)."""

    rows: pd.DataFrame
    checks: dict[int, tuple[int, int, bool]]


def _match_externs(trace: Trace, cmap: CompiledMap, calls: pd.DataFrame) -> Externs:
    ext = _outermost_externs(trace, calls)
    node = np.full(len(ext), -1, dtype=np.int64)
    graph = np.full(len(ext), -1, dtype=np.int64)
    call_ids = ext["call"].to_numpy()
    names = ext["name"].to_numpy(dtype=object)
    cuts = np.flatnonzero(call_ids[1:] != call_ids[:-1]) + 1 if len(ext) else np.zeros(0, dtype=np.int64)
    for part in np.split(np.arange(len(ext)), cuts) if len(ext) else []:
        g, at = match_call(names[part].tolist(), cmap.graphs)
        graph[part[at >= 0]], node[part] = g, at
    checks = _check_shapes(trace, cmap, ext, graph, node)
    ok = graph >= 0
    path = []
    for g, k in zip(graph[ok].tolist(), node[ok].tolist()):
        at = cmap.graphs[g].nodes.get(cmap.graphs[g].externs[k][0], -1)
        path.append(cmap.graphs[g].paths[at] if at >= 0 else "")
    rows = ext[ok].assign(
        path=np.array(path, dtype=object),
        graph=graph[ok],
        rejected=np.array([checks[g][2] for g in graph[ok].tolist()], dtype=bool),
    )
    return Externs(rows.reset_index(drop=True), checks)


def _check_shapes(
    trace: Trace, cmap: CompiledMap, ext: pd.DataFrame, graph: np.ndarray, node: np.ndarray
) -> dict[int, tuple[int, int, bool]]:
    """Per graph matched to calls: ops whose shapes were checked, of those disagreeing, and whether that
    rejects the graph's extern order."""
    source = Path(str(trace.source)) if trace.source else None
    ids = ext["external_id"].to_numpy()[graph >= 0]
    recorded = op_calls(source, [int(i) for i in ids if i != -1]) if source and source.is_file() else {}
    out: dict[int, tuple[int, int, bool]] = {}
    limit = _patterns().max_disagreement
    for g in sorted(set(graph[graph >= 0].tolist())):
        rows = np.flatnonzero(graph == g)
        verdicts = [
            _shapes_agree(recorded.get(int(ext["external_id"].iat[r])), cmap.graphs[g].externs[node[r]][2])
            for r in rows
        ]
        checked = [v for v in verdicts if v is not None]
        wrong = sum(1 for v in checked if not v)
        out[g] = (len(checked), wrong, wrong > limit * len(checked))
    return out


def _inductor_names(trace: Trace) -> set[str]:
    """Every distinct op name of the trace that names an Inductor kernel."""
    rx = _patterns().kernel_name
    names = pd.unique(trace.cpu["name"].astype(str).to_numpy(dtype=object))
    return {n for n in names.tolist() if rx.search(n) is not None}


@dataclass
class _Resolver:
    """A trace's compiled map, its kernels and extern ops resolved, and its compiled calls."""

    cmap: CompiledMap
    kernels: _Kernels
    externs: Externs
    scope: pd.DataFrame

    @classmethod
    def of(cls, trace: Trace, cmap: CompiledMap) -> _Resolver:
        calls = _calls(trace)
        return cls(
            cmap,
            _Kernels.of(cmap, _inductor_names(trace)),
            _match_externs(trace, cmap, calls),
            _scope(trace, cmap, calls),
        )

    def relative(self, op: str, extern_row: int, in_call: bool) -> tuple[str, Graph | None, str] | None:
        """(path below the compiled object, its graph, how) for one point of compiled work; None if the point
        is no compiled work; ("", None, UNMAPPED) if it is but no module is known."""
        kernel = self.kernels.paths.get(op)
        if kernel is not None:
            return kernel[0], kernel[1], BY_NODES
        if extern_row >= 0:
            rows = self.externs.rows
            g = self.cmap.graphs[int(rows["graph"].iat[extern_row])]
            if rows["rejected"].iat[extern_row]:
                return "", g, REJECTED
            return str(rows["path"].iat[extern_row]), g, BY_ORDER
        if in_call:
            return "", self.cmap.graphs[0], BY_REGION
        return ("", None, UNMAPPED) if op in self.kernels.paths else None

    def place(self, rel: str, g: Graph, base: tuple[str, str, str]) -> tuple[str, str, str] | None:
        """(module, class, stack) of `rel` in `g` below `base` (the range holding the call: path, class,
        stack; all "" where none does), or None where no base is known."""
        path, mtype, stack = base
        below = g.stack(rel)
        if "" in g.paths:
            below = below[1:]
        if path and not self.cmap.root:
            parts = stack.split(STACK_SEP) if stack else [mtype]
        elif not path and self.cmap.root:
            path, parts = self.cmap.root, [self.cmap.root_type] if self.cmap.root_type else []
        else:
            return None
        if rel:
            path = f"{path}.{rel}"
            mtype = g.types[g.paths.index(rel)] if rel in g.paths else ""
        elif not mtype:
            mtype = self.cmap.root_type
        chain = [t for t in parts + below if t]
        return path, mtype or (chain[-1] if chain else ""), STACK_SEP.join(chain)


def fill_compiled(
    trace: Trace, pid: Any, tid: Any, when: np.ndarray, ops: np.ndarray, columns: dict[str, np.ndarray]
) -> np.ndarray:
    """Points (launch calls or CPU ops at `when` on their threads, with op names `ops`) of compiled work
    given the module of their nodes in `columns` (module, module_type, module_stack; changed in place);
    returns how each got it (the `compiled` column: BY_NODES, BY_ORDER, BY_REGION, UNMAPPED; "" for work
    outside compiled code, and for every point of a trace without a compiled map)."""
    n = len(when)
    how = np.full(n, "", dtype=object)
    cmap = compiled_map(trace.metadata)
    if cmap is None or n == 0:
        return how
    r = _Resolver.of(trace, cmap)
    in_call = ranges_on_threads(r.scope, pid, tid, when) >= 0
    at_extern = ranges_on_threads(r.externs.rows, pid, tid, when)
    module, mtype, stack = columns["module"], columns["module_type"], columns["module_stack"]
    memo: dict[tuple, tuple[str, tuple[str, str, str] | None]] = {}
    for i in range(n):
        key = (ops[i], int(at_extern[i]), bool(in_call[i]), module[i], mtype[i], stack[i])
        if key not in memo:
            rel = r.relative(str(ops[i]), int(at_extern[i]), bool(in_call[i]))
            if rel is None:
                memo[key] = ("", None)
            elif rel[1] is None:
                memo[key] = (UNMAPPED, None)
            else:
                placed = r.place(rel[0], rel[1], (module[i], mtype[i], stack[i]))
                memo[key] = (rel[2] if placed else (UNMAPPED if not module[i] else BY_REGION), placed)
        how[i], placed = memo[key]
        if placed is not None:
            module[i], mtype[i], stack[i] = placed
    return how


@dataclass(frozen=True)
class CompiledSummary:
    """How the compiled work of an analysed span got its module: how -> (events, us)."""

    by_how: dict[str, tuple[int, float]]

    def note(self) -> str:
        total = sum(us for _, us in self.by_how.values())
        share = lambda us: f"{us / total:.1%}" if total > 0 else "0%"  # noqa: E731
        placed = [
            f"{n:,} by {how} ({share(us)} of their time)" for how, (n, us) in self.by_how.items() if how != UNMAPPED
        ]
        lost = self.by_how.get(UNMAPPED, (0, 0.0))
        text = (
            f"compiled code by module, from the nodes Inductor compiled: {'; '.join(placed) or 'none placed'}; "
            f"{lost[0]:,} without a module ({share(lost[1])})"
        )
        if REJECTED in self.by_how:
            text += (
                "; a graph's extern ops were left at the compiled module: their recorded input shapes "
                "contradict the order of its nodes"
            )
        return text


def compiled_summary(events: pd.DataFrame) -> CompiledSummary | None:
    """Counts of the compiled work in `events` by how it got its module; None if there is none."""
    if "compiled" not in events or not len(events):
        return None
    how = events["compiled"].to_numpy(dtype=object)
    dur = events["dur"].to_numpy(dtype=float)
    kinds = [k for k in (BY_NODES, BY_ORDER, BY_REGION, REJECTED, UNMAPPED) if (how == k).any()]
    if not kinds:
        return None
    return CompiledSummary({k: (int((how == k).sum()), float(dur[how == k].sum())) for k in kinds})
