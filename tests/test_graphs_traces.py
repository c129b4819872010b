"""The committed execution-mode traces (traces/graphs/, captured by `headroom profile --graphs` and
`--compile-mode reduce-overhead` on a GPU; lab/gpu/gpu_graphs.py): every replayed kernel has an op from its capture,
checked by name, a module where the capture recorded module ranges, and (decode) per-op shares close to the eager
step of the same model."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import REPO

import headroom
from headroom.projection.targets import targets
from headroom.trace.analysis import analyze

GRAPHS = REPO / "traces" / "graphs"
MANIFEST = json.loads((GRAPHS / "manifest.json").read_text())["traces"] if (GRAPHS / "manifest.json").is_file() else {}


def _runs(execution: str) -> list[str]:
    return sorted(n for n, m in MANIFEST.items() if _execution(m) == execution)


def _execution(m: dict) -> str:
    if m.get("compile"):
        return f"compiled-{m['compile_mode']}" if m.get("compile_mode") else "compiled"
    return "graphs" if m.get("graphs") else "eager"


def _eager_twin(name: str) -> str | None:
    """The eager trace of the same workload, phase, batch and sequence."""
    m = MANIFEST[name]
    key = ("workload", "flavour", "phase", "batch", "seq", "dtype", "layers")
    return next(
        (n for n, e in MANIFEST.items() if _execution(e) == "eager" and all(e.get(k) == m.get(k) for k in key)), None
    )


def _shares(events: pd.DataFrame, by: str) -> pd.Series:
    return events.groupby(by)["dur"].sum() / events["dur"].sum()


@pytest.mark.parametrize("name", _runs("graphs") + _runs("compiled-reduce-overhead"))
def test_replayed_kernels_have_ops(name):
    a = analyze(GRAPHS / name, use_cache=False)
    replayed = a.events[a.events["graph"] != ""]
    assert len(replayed), "a graphs run replays its step"
    assert set(replayed["graph"]) == {"capture"} and not (replayed["graph_check"] == 0).any()
    table = targets(a, by=("op",), top=None)
    assert float(table.loc[table["name"] == "(no op)", "share"].sum()) <= 0.01


@pytest.mark.parametrize("name", _runs("graphs"))
def test_replayed_kernels_have_modules(name):
    ev = analyze(GRAPHS / name, use_cache=False).events
    assert ev.loc[ev["module"] == "", "dur"].sum() <= 0.01 * ev["dur"].sum()


# A compiled run recorded with the map of Inductor's nodes to modules (`compiled_modules` in its manifest):
# `targets --by module` leaves at most 1% of its GPU time without a module.
@pytest.mark.parametrize("name", [n for n in _runs("compiled-reduce-overhead") if MANIFEST[n].get("compiled_modules")])
def test_compiled_kernels_have_modules(name):
    a = analyze(GRAPHS / name, use_cache=False)
    table = targets(a, by=("module",), top=None)
    assert float(table.loc[table["name"].isin(["(no module)", ""]), "share"].sum()) <= 0.01
    # the GEMMs on their projections, attention on its module: together most of the step (at batch 32 attention
    # over the 2048-token static cache is 69% of it, at batch 1 the weights' GEMMs 84%)
    assert float(table.loc[table["name"].isin(["Linear", "LlamaAttention"]), "share"].sum()) > 0.9
    assert float(table.loc[table["name"] == "Linear", "share"].sum()) > 0.25


# Decode runs the same work captured or eager. Prefill does not: under a stream capture transformers builds the
# causal mask (aten::where, fill_, le) and cuDNN attention runs masked (docs/graphs.md), so its op shares differ
# from eager's by what the capture changed, not by the attribution.
@pytest.mark.parametrize("name", [n for n in _runs("graphs") if MANIFEST[n].get("phase") == "decode"])
def test_replayed_decode_has_the_eager_shares(name):
    ev = analyze(GRAPHS / name, use_cache=False).events
    twin = _eager_twin(name)
    assert twin is not None, f"no eager trace of {name}'s configuration"
    eager = analyze(GRAPHS / twin, use_cache=False).events
    both = pd.concat([_shares(ev, "op"), _shares(eager, "op")], axis=1).fillna(0.0)
    assert (both.iloc[:, 0] - both.iloc[:, 1]).abs().max() < 0.03


@pytest.mark.parametrize("capture, warned", [("not checked", True), (None, True), ("ok", False)])
def test_a_speedup_verified_without_graphs_is_flagged_on_replayed_kernels(tmp_path, capture, warned):
    row = REPO / "docs" / "gpu" / "apriori" / "llama7b-decode-bs1-rmsnorm"
    result = json.loads((row / "verify.json").read_text())
    result.pop("capture", None)
    if capture is not None:
        result["capture"] = capture
    (tmp_path / "verify.json").write_text(json.dumps(result))
    problems = next(row.glob("*.toml"))
    graphed = headroom.project(
        GRAPHS / "llama-7b.decode-bs1-graphs.json.gz", files=[tmp_path / "verify.json"], problems=problems
    )
    eager = headroom.project(
        GRAPHS / "llama-7b.decode-bs1-eager.json.gz", files=[tmp_path / "verify.json"], problems=problems
    )
    flagged = [w for w in graphed.warnings if "verified without --graphs" in w]
    assert graphed.entries[0].kernels > 0  # the RMSNorm's kernels are found among the replayed ones
    assert bool(flagged) == warned
    assert not any("verified without --graphs" in w for w in eager.warnings)  # nothing replayed there
