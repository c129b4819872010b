"""The workload registry and the real default configurations (checked on the meta device)."""

from __future__ import annotations

import textwrap

import pytest
import torch

from headroom.errors import UserError
from headroom.profile.builders import materialize, meta_parameters
from headroom.profile.registry import get_workload, list_workloads, load_workload_file, workload_names
from headroom.profile.workload import Options, WorkloadSpec

SEVEN = {"llama-7b", "gpt2-xl", "bert-base", "dlrm", "dlrm-dcn", "resnet-50", "vit-b-16"}


def test_registry_has_the_seven_workloads_in_three_domains():
    specs = {s.name: s for s in list_workloads()}
    assert SEVEN <= set(specs)
    assert {specs[n].domain for n in SEVEN} == {"transformer", "recommender", "vision"}
    for name in SEVEN:
        s = specs[name]
        for key in ("mode", "batch", "dtype"):
            assert s.defaults[key].why, f"{name}: default {key} has no reason"
        assert s.default("mode") in s.modes
        assert "tiny" in s.flavours
    # helper modules (leading underscore) are not workloads
    assert not any(n.startswith("_") for n in workload_names())


def test_unknown_workload_lists_the_names():
    with pytest.raises(UserError) as e:
        get_workload("llama-8b")
    msg = str(e.value)
    assert "unknown workload 'llama-8b'" in msg
    for name in SEVEN:
        assert name in msg


# Parameters of the real configurations, counted without allocating.
EXPECTED_PARAMS = {
    "llama-7b": 6_738_415_616,  # Llama-2-7B
    "gpt2-xl": 1_557_611_200,  # GPT-2 XL, tied head
    "bert-base": 109_482_240,  # BERT-base with pooler
    "resnet-50": 25_557_032,  # torchvision/timm ResNet-50
    "vit-b-16": 86_567_656,  # ViT-B/16, 1000 classes
}


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMS))
def test_real_config_parameter_counts_on_meta(name):
    spec = get_workload(name)
    model = spec.meta_model("default")
    assert all(p.device.type == "meta" for p in model.parameters())
    assert spec.param_count_meta() == EXPECTED_PARAMS[name]


def _mlp(sizes):
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


@pytest.mark.parametrize("name", ["dlrm", "dlrm-dcn"])
def test_recommender_parameter_counts_on_meta(name):
    pytest.importorskip("torchrec")
    from headroom.workloads.dlrm import CRITEO_1TB_ROWS, DEFAULT_MAX_ROWS

    spec = get_workload(name)
    model = spec.meta_model("default")
    assert all(p.device.type == "meta" for p in model.parameters())
    rows = sum(min(r, DEFAULT_MAX_ROWS) for r in CRITEO_1TB_ROWS)
    assert rows == 54_184_588
    emb = sum(p.numel() for n, p in model.named_parameters() if "embedding_bags" in n)
    assert emb == rows * 128
    bottom = _mlp([13, 512, 256, 128])
    if name == "dlrm":
        over_in = 128 + 26 * 25 // 2 + 26  # dense + pairwise dots + (torchrec's) self terms
        dense = bottom + _mlp([over_in, 1024, 1024, 512, 256, 1])
    else:
        d = 27 * 128  # 26 sparse + 1 dense vectors
        cross = 3 * (d * 512 + 512 * d + d)  # low-rank V, W and bias per layer
        dense = bottom + cross + _mlp([d, 1024, 1024, 512, 256, 1])
    assert spec.param_count_meta() == rows * 128 + dense


def test_resolve_defaults_and_cpu_scaling():
    spec = get_workload("llama-7b")
    gpu = spec.resolve(Options(), "cuda")
    assert (gpu.mode, gpu.phase, gpu.batch, gpu.seq, gpu.dtype) == ("infer", "prefill", 4, 2048, "bfloat16")
    assert (gpu.layers, gpu.total_layers, gpu.extrapolated, gpu.notes) == (32, 32, False, [])
    assert gpu.kv_cache == "dynamic"
    dec = spec.resolve(Options(phase="decode"), "cuda")
    assert dec.kv_cache == "static" and dec.variant == "infer decode static-cache"
    assert (
        spec.resolve(Options(phase="decode", kv_cache="dynamic"), "cuda").tag == "llama-7b.infer.decode.dynamic-cache"
    )

    cpu = spec.resolve(Options(), "cpu")
    assert (cpu.layers, cpu.seq, cpu.batch, cpu.dtype) == (2, 128, 1, "float32")
    assert cpu.extrapolated and len(cpu.notes) == 4
    assert any("layers 32 -> 2" in n for n in cpu.notes)
    # what the user sets is kept
    mine = spec.resolve(Options(seq=64, layers=4), "cpu")
    assert (mine.seq, mine.layers) == (64, 4)
    assert not any(n.startswith(("seq", "layers")) for n in mine.notes)
    full = spec.resolve(Options(scale_for_cpu=False), "cpu")
    assert (full.layers, full.seq, full.notes) == (32, 2048, [])
    train = spec.resolve(Options(mode="train"), "cuda")
    assert (train.phase, train.kv_cache, train.batch) == (None, None, 1)


@pytest.mark.parametrize(
    "name,opts,msg",
    [
        ("llama-7b", Options(layers=33), "--layers must be between 1 and 32"),
        ("resnet-50", Options(layers=2), "--layers needs identical repeated blocks"),
        ("bert-base", Options(phase="decode"), "has no phases"),
        ("dlrm", Options(mode="infer"), "--mode infer is not supported"),
        ("llama-7b", Options(phase="sample"), "unknown --phase"),
        ("llama-7b", Options(kv_cache="paged"), "unknown --kv-cache"),
        ("llama-7b", Options(dtype="int8"), "unknown --dtype"),
        ("llama-7b", Options(flavour="8b"), "unknown flavour"),
        ("dlrm", Options(extra={"rows": "1"}), "unknown --opt rows"),
        ("resnet-50", Options(seq=128), "--seq does not apply"),
    ],
)
def test_bad_options_are_user_errors(name, opts, msg):
    with pytest.raises(UserError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        get_workload(name).resolve(opts, "cuda")


def test_meta_construction_then_materialize_matches_a_normal_build():
    from transformers import GPT2LMHeadModel, LlamaForCausalLM

    from headroom.workloads.gpt2 import gpt2_config
    from headroom.workloads.llama import llama_config

    ref = LlamaForCausalLM(llama_config("tiny"))
    with meta_parameters():
        m = LlamaForCausalLM(llama_config("tiny"))
    assert all(p.is_meta for p in m.parameters())
    materialize(m, torch.device("cpu"), dtype=torch.bfloat16)
    assert not any(p.is_meta for p in m.parameters())
    assert {p.dtype for p in m.parameters()} == {torch.bfloat16}
    for (n, b), (_, rb) in zip(m.named_buffers(), ref.named_buffers()):
        assert b.dtype == rb.dtype == torch.float32, n  # rotary frequencies stay fp32
        assert torch.equal(b, rb), n
    norms = [p for n, p in m.named_parameters() if n.endswith("norm.weight")]
    assert norms and all(bool((p == 1).all()) for p in norms)

    with meta_parameters():
        g = GPT2LMHeadModel(gpt2_config("tiny"))
    materialize(g, torch.device("cpu"))
    assert g.lm_head.weight is g.transformer.wte.weight  # tied weights stay tied


def test_materialize_refuses_meta_buffers():
    with torch.device("meta"):
        bn = torch.nn.BatchNorm1d(4)
    with pytest.raises(RuntimeError, match="meta device"):
        materialize(bn, torch.device("cpu"))


WORKLOAD_FILE = textwrap.dedent("""
    import torch
    from headroom.profile import Default, Step, WorkloadSpec, infer_step

    def build(cfg, device):
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to(device)
        x = torch.randn(cfg.batch, 32, device=device)
        if cfg.mode == "train":
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            def fn():
                opt.zero_grad()
                model(x).square().mean().backward()
                opt.step()
            return Step(fn, model)
        return Step(infer_step(lambda: model(x)), model)

    WORKLOAD = WorkloadSpec(
        name="{name}", domain="vision", description="a small MLP", model="torch.nn.Sequential MLP",
        build=build,
        meta_model=lambda flavour: torch.nn.Sequential(torch.nn.Linear(32, 64, device="meta"),
                                                       torch.nn.Linear(64, 8, device="meta")),
        modes=("infer", "train"),
        defaults={{"mode": Default("infer", "example"), "batch": Default(16, "example"),
                   "dtype": Default("fp32", "example")}},
    )
""")


def write_workload_file(tmp_path, name="user-mlp"):
    path = tmp_path / f"{name}.py"
    path.write_text(WORKLOAD_FILE.format(name=name))
    return path


def test_load_workload_file(tmp_path):
    path = write_workload_file(tmp_path, "user-mlp-a")
    added = load_workload_file(path)
    assert [s.name for s in added] == ["user-mlp-a"]
    spec = get_workload("user-mlp-a")
    assert isinstance(spec, WorkloadSpec) and spec.param_count_meta() == 32 * 64 + 64 + 64 * 8 + 8
    assert "user-mlp-a" in workload_names()
    # loading the same file again replaces its own spec
    load_workload_file(path)
    with pytest.raises(UserError, match="no such workload file"):
        load_workload_file(tmp_path / "missing.py")
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(UserError, match="defines no workload"):
        load_workload_file(empty)
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_here\n")
    with pytest.raises(UserError, match="failed to import"):
        load_workload_file(broken)


def test_fbgemm_cuda_is_not_detected_without_cuda():
    pytest.importorskip("torchrec")
    from headroom.workloads._torchrec import fbgemm_cuda_status

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    ok, why = fbgemm_cuda_status()
    assert not ok and "no CUDA" in why


def test_a_module_that_only_declares_WORKLOAD_is_registered(tmp_path):
    """discover() registers a dropped-in module's WORKLOAD even if it never calls register_workload."""
    import types

    from headroom.profile.registry import register_declared

    spec = load_workload_file(write_workload_file(tmp_path, "user-mlp-declared"))[0]
    module = types.SimpleNamespace(
        WORKLOAD=None, WORKLOADS=[WorkloadSpec(**{**spec.__dict__, "name": "user-mlp-b", "source": ""})]
    )
    assert [s.name for s in register_declared(module, "workloads/user_mlp_b.py")] == ["user-mlp-b"]
    assert get_workload("user-mlp-b").source == "workloads/user_mlp_b.py"
