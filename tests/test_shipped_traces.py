"""Facts about the H200 traces committed in traces/ (the project's evidence).

They were captured by lab/gpu/gpu_capture.sh on an H200 (docs/gpu-results.md); deepfm, din and
dlrm-int8 by lab/gpu/gpu_recsys.sh (docs/dlrm-bench.md).
These tests keep the classifier honest against them: if a rule change moves
one of these numbers, the change must explain why (and the docs be updated).
"""

import pytest

from headroom.report.tables import summary_frame
from headroom.trace.analysis import analyze, analyze_path
from headroom.trace.layers import extrapolate_layers
from lab.probes.layers_check import PAIRS, check
from tests.conftest import REPO, SHIPPED_TRACES

EXPECTED = {
    "bert-base infer",
    "dlrm train",
    "dlrm-dcn train",
    "gpt2-xl infer prefill",
    "resnet-50 train",
    "vit-b-16 infer",
    "llama-7b infer prefill",
    "llama-7b infer decode static-cache",
    "llama-7b infer decode dynamic-cache",
    "llama-7b infer prefill compile",
    "deepfm train",
    "din train",
    "dlrm-int8 infer",
}


@pytest.fixture(scope="module")
def table():
    return summary_frame(analyze_path(SHIPPED_TRACES)).set_index("workload")


def test_every_shipped_trace_is_an_h200_run_under_16mb(table):
    assert set(table.index) == EXPECTED
    assert set(table["device"]) == {"NVIDIA H200"}
    for f in SHIPPED_TRACES.glob("*.json.gz"):
        assert f.stat().st_size < 16 * 2**20


def test_transformers_are_dominated_by_gemm_and_attention_more_so_compiled(table):
    eager = table.loc["llama-7b infer prefill"]
    compiled = table.loc["llama-7b infer prefill compile"]
    assert 0.55 < eager["gemm_attention_conv_fraction"] < compiled["gemm_attention_conv_fraction"]
    assert compiled["gemm_attention_conv_fraction"] > 0.85  # the paper's 80-86% band, and above
    assert compiled["addressable_fraction"] < 0.10 < eager["addressable_fraction"]


def test_decode_is_launch_bound(table):
    # The GPU idles most of a decode step: faster kernels alone cannot buy much.
    assert table.loc["llama-7b infer decode static-cache", "idle_fraction"] > 0.8
    assert table.loc["llama-7b infer prefill", "idle_fraction"] < 0.05
    # HF's dynamic cache spends its addressable time concatenating the KV cache.
    assert table.loc["llama-7b infer decode dynamic-cache", "top_addressable_op"] == "aten::cat"


def test_recommenders_are_the_most_addressable(table):
    dlrm = table.loc["dlrm train"]
    assert dlrm["addressable_fraction"] > 0.55
    # The top addressable op is the backward of the dot-interaction gather, not the embedding.
    assert dlrm["top_addressable_op"] == "aten::_index_put_impl_"
    a = analyze(SHIPPED_TRACES / "dlrm-dcn.train.json.gz")
    assert a.manifest["info"]["embedding_path"].startswith("torchrec DistributedModelParallel")
    tbe = a.events[a.events["name"].str.contains("split_embedding")]
    assert len(tbe) > 0 and set(tbe["category"]) == {"embedding"}


def test_resnet_time_is_batch_norm_more_than_convolution():
    cats = analyze(SHIPPED_TRACES / "resnet-50.train.json.gz").categories.set_index("name")
    assert cats.loc["normalization", "fraction"] > cats.loc["conv", "fraction"] > 0.2


@pytest.mark.parametrize("phase", sorted(PAIRS))
def test_layers_extrapolation_within_one_point(phase):
    full, part = PAIRS[phase]
    r = check(REPO / full, REPO / part)
    assert r["max_abs_diff_pp"] < 1.0


def test_addressable_fraction_shrinks_as_llama_grows():
    seven = analyze(SHIPPED_TRACES / "llama-7b.infer.prefill.json.gz").addressable_fraction
    ext = {}
    for name, total in (("13b", 40), ("70b", 80)):
        a = analyze(SHIPPED_TRACES / "scaling" / f"llama-7b.{name}.infer.prefill.4of{total}-layers.json.gz")
        ext[name] = extrapolate_layers(a, 4, total).addressable_fraction
    assert seven > ext["13b"] > ext["70b"]


def test_dcn_cross_net_is_selectable_for_dlrm_bench_06():
    # The trace has a module range around the cross net; DLRM-Bench 06 selects exactly its forward kernels.
    from headroom.projection.matching import select
    from headroom.projection.problems import load_problems

    a = analyze(SHIPPED_TRACES / "dlrm-dcn.train.json.gz")
    ev = a.events
    cross = ev["module"].str.contains("inter_arch.crossnet", regex=False).to_numpy()
    forward = (ev["phase"] == "forward").to_numpy()
    chosen = select(ev, "problem:06_DCNv2LowRankCross", load_problems())
    assert (cross & forward).sum() == 72 and (chosen == (cross & forward)).all()
    assert {"gemm", "elementwise"} <= set(ev.loc[cross & forward, "category"])
    # Its backward kernels (linked to the cross net's forward ops by fwdbwd flows) are the cross net's too.
    assert (cross & ~forward).sum() == 135 and set(ev.loc[cross, "module_type"]) == {"LowRankCrossNet"}
    assert ev.loc[cross & ~forward, "dur"].sum() == pytest.approx(59803.411, abs=0.01)


def test_dlrm_interaction_backward_lands_on_the_interaction_arch():
    # The top addressable op of DLRM training (the gather's backward, index_put_) is the interaction arch's.
    a = analyze(SHIPPED_TRACES / "dlrm.train.json.gz")
    ev = a.events
    bwd = ev[(ev["phase"] == "backward") & (ev["module_type"] == "InteractionArch")]
    assert len(bwd) == 51 and bwd["dur"].sum() == pytest.approx(25520.2, abs=0.1)
    put = ev[ev["op"] == "aten::_index_put_impl_"]
    assert len(put) and (put["module_type"] == "InteractionArch").all() and (put["phase"] == "backward").all()
