"""The recommender workloads beyond DLRM (deepfm, din, dlrm-int8): each profiles at its tiny flavour on the
CPU, runs the ops it exists for, and the DLRM-Bench problems it stands for match its trace."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from headroom.profile.registry import get_workload
from headroom.profile.run import profile_workload
from headroom.profile.workload import Options
from headroom.projection.coverage import coverage

pytest.importorskip("torchrec")
pytest.importorskip("fbgemm_gpu")

FAST = dict(device="cpu", steps=1, warmup=1, timed_steps=1)

# workload -> (ops its trace must hold, module classes with time, DLRM-Bench problems it must match, must not)
CASES = {
    "deepfm": (
        {"aten::embedding_bag", "aten::_embedding_bag"},
        {"FactorizationMachine", "EmbeddingBagCollection"},
        {"01_EmbeddingBagSum", "02_WeightedMeanEmbeddingBag", "07_FMInteraction"},
        {"04_DotInteraction", "12_AttentionPooling"},
    ),
    "din": (
        {"fbgemm::jagged_to_padded_dense", "fbgemm::jagged_softmax", "aten::segment_reduce", "aten::bmm"},
        {"TargetAttentionPool", "SoftmaxPooling", "EmbeddingCollection"},
        {"08_JaggedToPaddedDense", "09_JaggedSum", "10_JaggedSoftmax", "12_AttentionPooling"},
        {"04_DotInteraction", "05_DotInteractionBackward"},
    ),
    "dlrm-int8": (
        {"fbgemm::int_nbit_split_embedding_codegen_lookup_function", "fbgemm::permute_pooled_embs"},
        {"QuantEmbeddingBags", "PermutePooledEmbeddings", "InteractionArch"},
        {"03_Int8RowwiseEmbeddingBag", "04_DotInteraction", "11_PermutePooledEmbeddings"},
        {"01_EmbeddingBagSum", "05_DotInteractionBackward", "12_AttentionPooling"},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_recsys_workload_runs_its_ops_and_matches_its_problems(tmp_path, name):
    ops, modules, want, not_want = CASES[name]
    r = profile_workload(name, Options(flavour="tiny", batch=64), out=tmp_path, **FAST)
    a = r.analysis
    assert a.mode == "cpu-ops" and a.manifest["workload"] == name and a.manifest["flavour"] == "tiny"
    names = set(a.events["name"].astype(str))
    assert ops <= names, ops - names
    assert modules <= set(a.events["module_type"].astype(str))
    c = coverage([a], suite="dlrm")
    matched = set(c.matched)
    assert want <= matched, (want - matched, matched)
    assert not (not_want & matched), not_want & matched
    for p in c.problems:
        for m in p.matches:
            assert m.mode == "cpu-ops" and 0 < m.share <= 1 and m.events > 0 and m.top


def test_recsys_defaults_are_production_sized_on_the_meta_device():
    from headroom.workloads.dlrm import CRITEO_1TB_ROWS, DEFAULT_MAX_ROWS

    rows = sum(min(r, DEFAULT_MAX_ROWS) for r in CRITEO_1TB_ROWS)
    assert rows == 54_184_588

    def mlp(sizes):
        return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))

    deepfm = get_workload("deepfm")
    assert deepfm.default("batch") == 65536
    assert deepfm.param_count_meta() == rows * 128 + mlp([13, 128]) + mlp([27 * 128, 1024, 512, 256, 1])
    din = get_workload("din")
    assert din.default("batch") == 16384 and din.default("seq") == 100
    att = mlp([4 * 128, 256, 64, 1])
    assert din.param_count_meta() == (10_000_000 + 100_000) * 64 + att + mlp([128, 128]) + mlp(
        [3 * 128, 1024, 512, 256, 1]
    )
    # int8 tables are buffers of fbgemm's TBE, not parameters: the count is the dense part
    int8 = get_workload("dlrm-int8")
    assert int8.default("mode") == "infer" and int8.default("dtype") == "fp16"
    assert int8.param_count_meta() == mlp([13, 512, 256, 128]) + mlp([128 + 27 * 26 // 2, 1024, 1024, 512, 256, 1])


def test_fbgemm_workloads_on_a_gpu_without_fbgemm_cuda_say_so(monkeypatch):
    import torch

    from headroom.errors import UserError
    from headroom.workloads import _torchrec, din

    cfg = get_workload("din").resolve(Options(flavour="tiny"), "cpu")
    din.need_fbgemm_cuda(cfg, torch.device("cpu"))  # a CPU runs fbgemm's CPU kernels
    monkeypatch.setattr(_torchrec, "fbgemm_cuda_status", lambda: (False, "no CUDA kernels (the CPU build?)"))
    with pytest.raises(UserError, match="din: .*CUDA build of fbgemm-gpu.*CPU build"):
        din.need_fbgemm_cuda(cfg, torch.device("cuda"))


def test_deepfm_production_path_is_the_weighted_tbe(tmp_path):
    """deepfm under DistributedModelParallel (gloo and fbgemm's CPU kernels here; NCCL and CUDA on a GPU):
    the weighted TBE runs, not PyTorch's embedding_bag, so 02 matches and 01 (the unweighted TBE) does not."""
    r = profile_workload("deepfm", Options(flavour="tiny", batch=64, extra={"sharding": "dmp"}), out=tmp_path, **FAST)
    a = r.analysis
    info = a.manifest["info"]
    assert info["sharding"] == "dmp" and info["process_group"] == "gloo" and "weighted TBE" in info["embedding_path"]
    names = set(a.events["name"].astype(str))
    assert any("split_embedding_codegen_forward_weighted" in n for n in names)
    assert "aten::embedding_bag" not in names and "aten::_embedding_bag" not in names
    assert "FactorizationMachine" in set(a.events["module_type"].astype(str))
    matched = set(coverage([a], suite="dlrm").matched)
    assert {"02_WeightedMeanEmbeddingBag", "07_FMInteraction"} <= matched and "01_EmbeddingBagSum" not in matched


def test_deepfm_sharding_option_is_checked(monkeypatch):
    import torch

    from headroom.errors import UserError
    from headroom.workloads import _torchrec, deepfm

    cfg = get_workload("deepfm").resolve(Options(flavour="tiny", extra={"sharding": "tbe"}), "cpu")
    with pytest.raises(UserError, match="deepfm: --opt sharding must be auto, dmp or none"):
        deepfm.resolve_sharding(cfg, torch.device("cpu"))
    auto = get_workload("deepfm").resolve(Options(flavour="tiny"), "cpu")
    assert deepfm.resolve_sharding(auto, torch.device("cpu")) == ("none", "CPU")
    monkeypatch.setattr(_torchrec, "fbgemm_cuda_status", lambda: (True, "fbgemm_gpu 1.6.0 with CUDA kernels"))
    assert deepfm.resolve_sharding(auto, torch.device("cuda")) == ("dmp", "fbgemm_gpu 1.6.0 with CUDA kernels")
    monkeypatch.setattr(_torchrec, "fbgemm_cuda_status", lambda: (False, "no CUDA kernels"))
    assert deepfm.resolve_sharding(auto, torch.device("cuda"))[0] == "none"


def test_the_suites_embedding_problem_keeps_the_workloads_criteo_shapes():
    # the problem file runs on its own (no headroom import), so it carries its own copy of the shapes
    from headroom.workloads._criteo import CRITEO_1TB_ROWS, MLPERF_MULTI_HOT

    problem = Path(__file__).parents[1] / "headroom/suites/dlrm/problems/01_EmbeddingBagSum.py"
    assigned = {
        t.id: node.value
        for node in ast.parse(problem.read_text()).body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    assert ast.literal_eval(assigned["MLPERF_ROWS"]) == CRITEO_1TB_ROWS
    assert ast.literal_eval(assigned["MULTI_HOT"]) == MLPERF_MULTI_HOT
