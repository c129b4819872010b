"""The substitution candidates (examples/substitutions/): on a CPU their torch path computes what the
module they replace computes, with random weights (the workloads' norms start at weight 1, which
would hide a candidate that forgets the weight). Their Triton kernels run on the GPU
(lab/gpu/gpu_validate.py checks the variant trace holds them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from headroom.pyfile import import_file

CAND = Path(__file__).resolve().parents[1] / "examples" / "substitutions"


def cand(name: str):
    return import_file(CAND / f"{name}.py", "test_candidate")


def _rel(a, b) -> float:
    return float((a.detach().double() - b.detach().double()).norm() / b.detach().double().norm())


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_rmsnorm_matches_llama_rmsnorm_with_random_weights(dtype, tol):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    ref = LlamaRMSNorm(96, eps=1e-5).to(dtype)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
    new = cand("llama_rmsnorm").ModelNew(96, 1e-5)
    new.load_state_dict(ref.state_dict())
    new.to(dtype)
    x = torch.randn(3, 7, 96).to(dtype)
    got, want = new(x), ref(x)
    assert got.dtype == want.dtype == dtype
    assert _rel(got, want) < tol
    # forgetting the weight would be wrong by ~30% here
    assert _rel(want / ref.weight, want) > 0.1


def test_swiglu_mlp_matches_llama_mlp_and_keeps_its_parameter_names():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=172, hidden_act="silu")
    ref = LlamaMLP(cfg)
    new = cand("llama_swiglu_mlp").ModelNew(cfg)
    assert set(new.state_dict()) == set(ref.state_dict())
    new.load_state_dict(ref.state_dict())
    x = torch.randn(2, 5, 64)
    assert _rel(new(x), ref(x)) < 1e-6
    with pytest.raises(ValueError, match="fuses SiLU"):
        cand("llama_swiglu_mlp").ModelNew(LlamaConfig(hidden_size=64, intermediate_size=172, hidden_act="gelu"))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_gelu_tanh_matches_new_gelu(dtype, tol):
    from transformers.activations import NewGELUActivation

    x = (torch.randn(4, 300) * 3).to(dtype)
    got, want = cand("gpt2_gelu_tanh").ModelNew()(x), NewGELUActivation()(x)
    assert got.dtype == dtype
    assert _rel(got, want) < tol


def test_dlrm_interaction_forward_and_backward_match_torchrec():
    pytest.importorskip("torchrec")
    from torchrec.models.dlrm import InteractionArch

    torch.manual_seed(0)
    f, b, d = 26, 33, 16
    ref, new = InteractionArch(f), cand("dlrm_interaction").ModelNew(f)
    assert set(new.state_dict()) == set(ref.state_dict()) == set()  # torchrec's buffer is not persistent
    dense = torch.randn(b, d, dtype=torch.float64, requires_grad=True)
    sparse = torch.randn(b, f, d, dtype=torch.float64, requires_grad=True)
    up = torch.randn(b, d + f * (f + 1) // 2, dtype=torch.float64)
    want = ref(dense, sparse)
    gw = torch.autograd.grad(want, (dense, sparse), up)
    got = new(dense, sparse)
    gg = torch.autograd.grad(got, (dense, sparse), up)
    assert got.shape == want.shape == (b, d + 351)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    for x, y in zip(gg, gw):
        assert torch.allclose(x, y, rtol=1e-12, atol=1e-12)


def test_dlrm_interaction_backward_has_no_sort_and_one_bmm():
    """The point of the rewrite: autograd's index_put_(accumulate) backward (a sort) and its second
    bmm are gone; what is left is one index_copy_ and one bmm."""
    pytest.importorskip("torchrec")
    from torch.profiler import ProfilerActivity, profile
    from torchrec.models.dlrm import InteractionArch

    f, b, d = 26, 64, 16
    counts = {}
    for label, m in (("torchrec", InteractionArch(f)), ("candidate", cand("dlrm_interaction").ModelNew(f))):
        dense = torch.randn(b, d, requires_grad=True)
        sparse = torch.randn(b, f, d, requires_grad=True)
        out = m(dense, sparse)
        with profile(activities=[ProfilerActivity.CPU]) as p:
            out.backward(torch.ones_like(out))
        names = [e.name for e in p.events()]
        counts[label] = {
            "bmm": names.count("aten::bmm"),
            "sort": sum("sort" in n for n in names),
            "index_put": sum("index_put" in n for n in names),
        }
    assert counts["torchrec"]["bmm"] == 2 and counts["torchrec"]["index_put"] >= 1
    assert counts["candidate"] == {"bmm": 1, "sort": 0, "index_put": 0}


def test_every_triton_candidate_declares_its_gpu_kernels():
    for path in sorted(CAND.glob("*.py")):
        tree = ast.parse(path.read_text())
        kernels = [
            n
            for n in tree.body
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "GPU_KERNELS" for t in n.targets)
        ]
        assert kernels, f"{path.name}: no GPU_KERNELS"
        names = ast.literal_eval(kernels[0].value)
        # the file's Triton kernels, and those of a sibling candidate it builds on (`import llama_rmsnorm`)
        trees = [tree] + [
            ast.parse((CAND / f"{a.name}.py").read_text())
            for n in tree.body
            if isinstance(n, ast.Import)
            for a in n.names
            if (CAND / f"{a.name}.py").is_file()
        ]
        jitted = {
            f.name
            for t in trees
            for n in ast.walk(t)
            if isinstance(n, ast.If)
            for f in n.body
            if isinstance(f, ast.FunctionDef)
        }
        assert set(names) <= jitted, f"{path.name}: GPU_KERNELS {names} are not the file's Triton kernels"
        if "triton" in path.read_text():
            assert names, f"{path.name} uses Triton but declares no kernel to look for"
