"""CUDA-graph replays attributed to the ops, modules and phases that made their nodes (headroom/trace/graphs.py),
and projections that know a replayed kernel has no CPU launch of its own.

On the real H100 traces in ../shared/traces-cudagraph/ (llama-7b decode, bs1, static cache, bf16; README there):
one trace holding an eager step, its capture under the profiler and three replays (4 layers); a 32-layer trace
of replays only, with the same step profiled eagerly as its source; a torch.compile(reduce-overhead) trace.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from conftest import SHARED

from headroom.projection.project import project
from headroom.projection.speedups import collect_entries, load_speedup_file
from headroom.projection.targets import targets
from headroom.trace.analysis import analyze
from headroom.trace.attribute import attribute_kernels_to_ops
from headroom.trace.graphs import CAPTURE, KERNEL_NAME, SOURCE, UNMATCHED, capture_templates, graph_summary
from headroom.trace.load import load_trace

GRAPHS = SHARED / "traces-cudagraph"
CAPTURE_TRACE = GRAPHS / "llama4_decode_capture_and_replay.json.gz"
REPLAYS = GRAPHS / "llama32_decode_cudagraph.json.gz"
EAGER = GRAPHS / "llama32_decode_eager.json.gz"
COMPILED = GRAPHS / "llama32_decode_compiled_ro.json.gz"

pytestmark = pytest.mark.skipif(not GRAPHS.is_dir(), reason="needs ../shared/traces-cudagraph")


def _op_shares(events: pd.DataFrame) -> pd.Series:
    return events.groupby("op")["dur"].sum() / events["dur"].sum()


def _no_op_share(path, **kwargs) -> float:
    table = targets(analyze(path, use_cache=False, **kwargs), by=("op",), top=None)
    return float(table.loc[table["name"] == "(no op)", "share"].sum())


def test_capture_in_the_trace_gives_every_replayed_kernel_its_node():
    events = attribute_kernels_to_ops(load_trace(CAPTURE_TRACE, use_cache=False))
    replayed = events[events["graph"] != ""]
    assert len(replayed) == 3 * 237 and set(replayed["graph"]) == {CAPTURE}
    # Every node's op also ran in the eager step: each replayed kernel name is one its op launched there.
    assert (replayed["graph_check"] == 1).all()
    eager = events[(events["graph"] == "") & (events["op"] != "")]
    eager = eager[eager["launch_name"].str.startswith("cu")]
    # Per replay, the ops' shares of GPU time are the eager step's within 3 points.
    for _, one in replayed.groupby("correlation"):
        both = pd.concat([_op_shares(one), _op_shares(eager)], axis=1).fillna(0.0)
        assert (both.iloc[:, 0] - both.iloc[:, 1]).abs().max() < 0.03
        assert (one["op"] != "").all()


def test_targets_over_the_replays_leave_no_kernel_without_an_op():
    assert _no_op_share(CAPTURE_TRACE, window="^replay_") <= 0.01


def test_a_replay_trace_takes_its_context_from_an_eager_trace_of_the_same_step():
    assert _no_op_share(REPLAYS) > 0.99  # alone: nothing says which op made a replayed kernel
    assert _no_op_share(REPLAYS, graph_source=EAGER) <= 0.01
    graphed = analyze(REPLAYS, graph_source=EAGER, use_cache=False)
    eager = analyze(EAGER, use_cache=False)
    assert set(graphed.events.loc[graphed.events["graph"] != "", "graph"]) == {SOURCE}
    both = pd.concat([_op_shares(graphed.events), _op_shares(eager.events)], axis=1).fillna(0.0)
    assert (both.iloc[:, 0] - both.iloc[:, 1]).abs().max() < 0.03
    assert any("from the source trace" in n for n in graphed.notes)


def test_without_a_source_the_replayed_kernels_are_said_to_have_no_node():
    a = analyze(REPLAYS, use_cache=False)
    s = graph_summary(a.events)
    assert s is not None and s.replays == 5 and set(s.by_origin) == {UNMATCHED}
    assert (a.events.loc[a.events["graph"] == UNMATCHED, "op"] == "").all()
    assert any("--graph-source" in n for n in a.notes)


def test_inductor_kernels_are_their_own_op_and_vendor_kernels_stay_without_one():
    events = analyze(COMPILED, use_cache=False).events
    named = events[events["graph"] == KERNEL_NAME]
    assert len(named) and (named["op"] == named["name"]).all() and named["name"].str.startswith("triton_").all()
    lost = events[events["graph"] == UNMATCHED]
    assert len(lost) and not lost["name"].str.startswith("triton_").any() and (lost["op"] == "").all()


def _shifted(trace, rows: np.ndarray, by: np.ndarray):
    launches = trace.launches.copy()
    ts = launches["ts"].to_numpy(dtype=float).copy()
    ts[rows] = ts[rows] + by
    launches["ts"] = ts
    return dataclasses.replace(trace, launches=launches, cache_key=None)


def _capture_nodes(trace) -> np.ndarray:
    """Positions in the launch table of the capture's nodes, in order."""
    calls = trace.launches
    (t,) = capture_templates(trace)
    inside = calls["ts"].between(t.start, calls.loc[calls["name"].str.contains("EndCapture"), "ts"].max())
    ran = set(trace.gpu["correlation"].tolist())
    work = calls["name"].str.match("^(cudaLaunch|cuLaunch)") & ~calls["correlation"].isin(ran)
    rows = np.flatnonzero((inside & work).to_numpy())
    return rows[np.argsort(calls["ts"].to_numpy()[rows], kind="stable")]


def test_a_capture_whose_order_disagrees_with_the_kernel_names_is_not_used():
    trace = load_trace(CAPTURE_TRACE, use_cache=False)
    nodes = _capture_nodes(trace)
    assert len(nodes) == 237
    # The capture's nodes in reverse order: as many as each replay, but the names no longer follow the ops.
    ts = trace.launches["ts"].to_numpy(dtype=float)[nodes]
    events = attribute_kernels_to_ops(_shifted(trace, nodes, ts[::-1] - ts))
    replayed = events[events["graph"] != ""]
    assert set(replayed["graph"]) == {UNMATCHED} and (replayed["op"] == "").all()


def test_a_capture_with_a_node_missing_does_not_fit_the_replays():
    trace = load_trace(CAPTURE_TRACE, use_cache=False)
    nodes = _capture_nodes(trace)
    calls = trace.launches.drop(index=trace.launches.index[nodes[100]]).reset_index(drop=True)
    events = attribute_kernels_to_ops(dataclasses.replace(trace, launches=calls, cache_key=None))
    assert set(events.loc[events["graph"] != "", "graph"]) == {UNMATCHED}


def test_the_cache_keeps_a_source_attribution_apart_from_a_plain_one(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path))
    plain = analyze(REPLAYS)
    sourced = analyze(REPLAYS, graph_source=EAGER)
    again = analyze(REPLAYS)
    assert set(plain.events["graph"]) - {""} == {UNMATCHED} == set(again.events["graph"]) - {""}
    assert set(sourced.events["graph"]) - {""} == {SOURCE}


def test_fewer_launches_save_cpu_time_in_eager_and_none_in_a_graph():
    entries, _ = collect_entries(["op:aten::rsqrt=2,launches=0"])
    graphed = project(analyze(REPLAYS, graph_source=EAGER, use_cache=False), entries)
    eager = project(analyze(EAGER, use_cache=False), entries)
    (g,), (e,) = graphed.entries, eager.entries
    assert g.cpu["replayed_kernels"] == g.kernels > 0 and g.cpu["changed_calls"] == 0
    assert g.cpu["removed_cpu_us"] == 0 == g.cpu["added_cpu_us"]
    assert e.cpu["replayed_kernels"] == 0 and e.cpu["removed_cpu_us"] > 0
    assert any("replayed from a CUDA graph" in w for w in graphed.warnings)
    # In the graph the step is GPU-bound: the estimate is the GPU time saved (Amdahl's) and, with every
    # node of the call gone, the gaps before those nodes; never less than Amdahl's, never near eager's.
    assert g.cpu["graph_nodes_removed"] == g.kernels
    amdahl = next(p for p in graphed.projections if p.method == "amdahl" and p.scenario == "speedups")
    assert amdahl.speedup <= graphed.estimate.speedup <= amdahl.speedup * 1.02
    assert eager.estimate.speedup > graphed.estimate.speedup


def test_a_candidate_that_synchronises_is_said_to_break_the_capture(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[[speedup]]\nselect = "op:aten::rsqrt"\nspeedup = 2\nlaunches = 1\nsyncs = 1\n')
    res = project(analyze(REPLAYS, graph_source=EAGER, use_cache=False), load_speedup_file(f).entries)
    (d,) = res.entries
    assert d.cpu["breaks_capture"] is True
    assert any("breaks the capture" in w for w in res.warnings)
