"""headroom.projection.graph_calls: the calls of kernels a CUDA graph replays, and the graph nodes a candidate with
fewer kernels per call removes, on the committed H100 runs of docs/graphs.md ("Checked against measurement")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headroom.projection.baseline import as_baseline
from headroom.projection.graph_calls import _outermost_module, graph_calls, graph_changes, node_gap_us
from headroom.projection.matching import select
from headroom.projection.problems import ProblemMap
from headroom.projection.project import project
from headroom.projection.selectors import parse_selector
from headroom.projection.speedups import collect_entries
from headroom.trace.analysis import analyze

REPO = Path(__file__).resolve().parents[1]
ROWS = REPO / "docs" / "gpu" / "apriori-graphs"
DOC = REPO / "docs" / "graphs.md"
RMSNORM = ROWS / "llama7b-decode-bs1-rmsnorm-graphs"


@pytest.fixture(scope="module")
def rmsnorm():
    return analyze(RMSNORM / "base.json.gz", use_cache=False)


def test_the_outermost_module_the_atom_names_is_the_call():
    stack = "LlamaForCausalLM/LlamaModel/LlamaDecoderLayer/LlamaMLP/Linear"
    path = "model.model.layers.3.mlp.gate_proj"
    assert _outermost_module(path, stack, "LlamaMLP") == "model.model.layers.3.mlp"  # by class
    assert _outermost_module(path, stack, r"layers\.3\.mlp(?:\.|$)") == "model.model.layers.3.mlp"  # by path
    assert _outermost_module(path, stack, "Linear") == path
    assert _outermost_module(path, stack, "LlamaDecoderLayer") == "model.model.layers.3"
    # a stack that does not align with the path: only the path can match; else the path itself
    assert _outermost_module(path, "Linear", "LlamaMLP") == path
    assert _outermost_module(path, "Linear", r"\.mlp$") == "model.model.layers.3.mlp"
    # a called container (torchvision's Sequential stages): its index is a level of its own
    conv = "model.layer1.0.conv1"
    assert _outermost_module(conv, "ResNet/Sequential/Bottleneck/Conv2d", "Bottleneck") == "model.layer1.0"
    assert _outermost_module(conv, "ResNet/Sequential/Bottleneck/Conv2d", "Sequential") == "model.layer1"


def test_each_rmsnorm_instance_is_one_call_of_its_eight_kernels(rmsnorm):
    b = as_baseline(rmsnorm)
    sel = parse_selector("module:LlamaRMSNorm & phase:forward")
    mask = select(b.events, sel, ProblemMap([]))
    calls = graph_calls(b, sel, mask, ProblemMap([]))
    # 65 norms per step (two per layer and the final one), 3 replayed steps, 8 kernels each
    assert len(calls) == 65 * b.num_steps == 195
    assert {c.kernels for c in calls} == {8}
    assert sum(len(c.events) for c in calls) == int(mask.sum())
    assert len({c.label for c in calls}) == 65  # the instance paths, each once per step
    assert all(c.kind == "graph" and c.footprint_us == 0.0 for c in calls)
    # the candidate's one kernel per call: 7 nodes gone per call; the reference's eight: no change
    fused = graph_changes(calls, 1)
    assert len(fused) == 195 and all(not ch.cpu and ch.graph and len(ch.groups) == 1 for ch in fused)
    assert graph_changes(calls, 8) == [] == graph_changes(calls, 9)
    assert [len(g) for g in graph_changes(calls, 3)[0].groups] == [3, 3, 2]


def _gaps_inside(b, calls) -> float:
    """The measured gaps before every kernel of a call but its first, per step."""
    ev = b.events
    ts, end = ev["ts"].to_numpy(dtype=float), ev["end"].to_numpy(dtype=float)
    total = 0.0
    for c in calls:
        e = np.sort(c.events)
        total += float(np.sum(ts[e[1:]] - end[e[:-1]]))
    return total / b.num_steps


def test_fewer_kernels_per_call_remove_their_nodes_gaps(rmsnorm):
    """The same speedup with 1 kernel per call instead of the reference's 8 saves the gaps inside the calls
    (0.42 us per node on the H100), on the profiled clock; the eager-style CPU side is unchanged."""
    b = as_baseline(rmsnorm)
    sel = parse_selector("module:LlamaRMSNorm & phase:forward")
    calls = graph_calls(b, sel, select(b.events, sel, ProblemMap([])), ProblemMap([]))
    gaps = _gaps_inside(b, calls)
    assert 455 * 0.3 < gaps < 455 * 0.6  # 65 calls x 7 gaps per step
    same, _ = collect_entries(["module:LlamaRMSNorm & phase:forward=2,launches=8"])
    fused, _ = collect_entries(["module:LlamaRMSNorm & phase:forward=2,launches=1"])
    p8 = project(rmsnorm, same, methods=("replay",))
    p1 = project(rmsnorm, fused, methods=("replay",))
    r8 = next(p for p in p8.projections if p.scenario == "speedups")
    r1 = next(p for p in p1.projections if p.scenario == "speedups")
    saved = (r8.projected_us - r1.projected_us) / b.num_steps
    assert saved == pytest.approx(gaps, rel=0.05)
    (e1,) = p1.entries
    assert e1.cpu["graph_calls"] == 195 and e1.cpu["graph_nodes_removed"] == 195 * 7
    assert e1.cpu["changed_calls"] == 0 and e1.cpu["removed_cpu_us"] == 0.0


def test_more_kernels_per_call_add_their_nodes_gaps(rmsnorm):
    """A candidate with 16 kernels where the reference has 8 keeps the 8 and gains 8 nodes per call, each
    costing the trace's median gap between back-to-back replayed kernels."""
    b = as_baseline(rmsnorm)
    gap = node_gap_us(b)
    assert 0.3 < gap < 0.6
    same, _ = collect_entries(["module:LlamaRMSNorm & phase:forward=2,launches=8"])
    split, _ = collect_entries(["module:LlamaRMSNorm & phase:forward=2,launches=16"])
    r8 = next(p for p in project(rmsnorm, same, methods=("replay",)).projections if p.scenario == "speedups")
    p16 = project(rmsnorm, split, methods=("replay",))
    r16 = next(p for p in p16.projections if p.scenario == "speedups")
    added = (r16.projected_us - r8.projected_us) / b.num_steps
    assert added == pytest.approx(65 * 8 * gap, rel=0.02)
    (e,) = p16.entries
    assert e.cpu["graph_nodes_added"] == 195 * 8 and e.cpu["graph_nodes_removed"] == 0


def test_the_table_in_the_docs_is_what_the_committed_runs_give():
    from headroom.report.apriori import apriori_rows, apriori_table

    rows = apriori_rows(ROWS)
    assert len(rows) == 4 and all(r.graphs for r in rows)
    table = apriori_table(rows, shipped=True)
    assert table in DOC.read_text(), (
        "docs/graphs.md: python -m headroom.report.apriori docs/gpu/apriori-graphs --shipped"
    )
    # within 1% of the measurement, each inside the shipped 90% interval (fitted on eager rows only)
    from headroom.projection.calibration import shipped_calibration

    cal = shipped_calibration()
    for r in rows:
        assert abs(r.error) < 0.01, r.name
        assert r.name not in cal.names
        lo, hi = cal.interval(r.estimate, r.noise)
        assert lo <= r.measured <= hi, r.name


@pytest.mark.parametrize(
    "trace",
    [
        "traces/graphs/llama-7b.decode-bs1-graphs.json.gz",
        "traces/bert-base.infer.json.gz",
        "traces/resnet-50.train.json.gz",
        "traces/vit-b-16.infer.json.gz",
    ],
)
def test_every_module_path_aligns_with_its_class_stack_on_the_shipped_traces(trace):
    """The calls' grouping reads a kernel's module path against its class stack: on every shipped module-ranged
    trace each class of the stack names the prefix of the path at its depth, so a class atom finds its instance."""
    ev = analyze(REPO / trace).events
    pairs = ev.loc[ev["module"].fillna("") != "", ["module", "module_stack"]].drop_duplicates()
    assert len(pairs) > 100
    for path, stack in zip(pairs["module"], pairs["module_stack"]):
        classes = stack.split("/")
        depths = []
        for cls in classes:
            got = _outermost_module(path, stack, f"^{cls}$")
            assert path == got or path.startswith(got + "."), (path, stack, cls)  # a prefix of the path
            depths.append(got.count("."))
        assert depths == sorted(depths)  # deeper classes, longer prefixes
        assert _outermost_module(path, stack, f"^{classes[-1]}$") == path or classes.count(classes[-1]) > 1
