"""The MoE workload (workloads/mixtral.py) and the MoE classification rules: routing, top-k, token
permutation and expert GEMMs, as transformers' Mixtral launches them."""

from __future__ import annotations

import pytest

from headroom.errors import UserError
from headroom.profile.registry import get_workload
from headroom.profile.run import profile_workload
from headroom.profile.workload import Options
from headroom.trace.classify import classify_one, load_classifier

FAST = dict(device="cpu", steps=1, warmup=1, timed_steps=1)


def test_mixtral_counts_the_published_46_7b_parameters():
    spec = get_workload("mixtral-8x7b")
    assert spec.param_count_meta() == 46_702_792_704  # mistralai/Mixtral-8x7B-v0.1: 46.7B
    assert spec.num_layers is not None and spec.num_layers("default") == 32


def ops_of(result, category: str) -> set[str]:
    ev = result.analysis.events
    return set(ev.loc[ev["category"] == category, "op"].astype(str))


def test_tiny_mixtral_routes_permutes_and_runs_grouped_expert_gemms(tmp_path):
    r = profile_workload("mixtral-8x7b", Options(flavour="tiny", seq=32), out=tmp_path, **FAST)
    assert r.manifest["info"]["experts_implementation"] == "grouped_mm"
    assert {"aten::topk", "aten::_softmax"} <= ops_of(r, "routing")
    assert {"aten::sort", "aten::histc", "aten::index"} <= ops_of(r, "permute")
    assert "aten::_grouped_mm" in ops_of(r, "gemm")


def test_eager_experts_loop_over_experts_with_gemms_and_index_add(tmp_path):
    r = profile_workload(
        "mixtral-8x7b", Options(flavour="tiny", seq=32, extra={"experts": "eager"}), out=tmp_path, **FAST
    )
    assert r.manifest["info"]["experts_implementation"] == "eager"
    assert "aten::index_add_" in ops_of(r, "permute") and "aten::mm" in ops_of(r, "gemm")
    with pytest.raises(UserError, match="experts=bogus"):
        profile_workload("mixtral-8x7b", Options(flavour="tiny", extra={"experts": "bogus"}), out=tmp_path, **FAST)


@pytest.fixture(scope="module")
def rules():
    return load_classifier()[0]


@pytest.mark.parametrize(
    "name, op, module, category",
    [
        # a GPU trace: the router's skinny GEMM, softmax and top-k are routing, whatever their kernel names
        ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "aten::mm", "model.model.layers.3.mlp.gate", "routing"),
        ("cunn_SoftMaxForward<4, float>", "aten::_softmax", "model.model.layers.3.mlp.gate", "routing"),
        ("gatherTopK<float, unsigned int, 2>", "aten::topk", "model.model.layers.3.mlp.gate", "routing"),
        # token permutation in the experts module
        ("DeviceRadixSortOnesweepKernel", "aten::sort", "model.model.layers.3.mlp.experts", "permute"),
        ("histogram1D<float>", "aten::histc", "model.model.layers.3.mlp.experts", "permute"),
        ("index_elementwise_kernel", "aten::index", "model.model.layers.3.mlp.experts", "permute"),
        # expert GEMMs: the grouped GEMM is a vendor GEMM
        ("cutlass::device_kernel<GroupProblemShape>", "aten::_grouped_mm", "model.model.layers.3.mlp.experts", "gemm"),
        # a dense model's MLP and a sort elsewhere are untouched
        ("nvjet_tst_128x256", "aten::mm", "model.model.layers.3.mlp.gate_proj", "gemm"),
        ("DeviceRadixSortOnesweepKernel", "aten::sort", "model.sampler", "sort"),
    ],
)
def test_moe_rules_on_gpu_kernels(rules, name, op, module, category):
    assert classify_one(rules, "kernel", name, op, op, "", module) == category
