"""`headroom extract`: problems with the real shapes from a workload's modules and ops, that `headroom
verify` runs unchanged (an honest candidate passes, an all-zeros one fails), whose selector entry
`headroom project --problems` reads, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from headroom.errors import UserError
from headroom.extract import extract
from headroom.extract.autograd import forward_backward, with_backward
from headroom.extract.capture import Construction, TensorSpec, bind_init, positional_init
from headroom.extract.codegen import Source, literal, tensor_expr
from headroom.profile import Options, get_workload
from headroom.pyfile import import_file

REPO = Path(__file__).resolve().parents[1]
TINY = Options(flavour="tiny")


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "headroom.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


@pytest.fixture(scope="module")
def rmsnorm(tmp_path_factory):
    out = tmp_path_factory.mktemp("extract")
    return extract("llama-7b", "LlamaRMSNorm", TINY, device="cpu", out=out, command="headroom extract test")


def test_the_problem_has_the_real_shapes_calls_and_share(rmsnorm):
    r = rmsnorm
    assert r.name == "llama-7b__LlamaRMSNorm"
    assert r.problem.name == "llama-7b__LlamaRMSNorm.py" and r.entry.name == "llama-7b__LlamaRMSNorm.toml"
    # tiny llama on a CPU: 2 layers x (input + post-attention norm) + the final norm
    assert r.calls_per_step == 5
    # paths in the ranged module (LlamaForCausalLM: its LlamaModel is `.model`)
    assert r.instances == [
        "model.layers.0.input_layernorm",
        "model.layers.0.post_attention_layernorm",
        "model.layers.1.input_layernorm",
        "model.layers.1.post_attention_layernorm",
        "model.norm",
    ]
    assert r.share is not None and r.share.mode == "cpu-ops"
    # CPU op time (the tiny model on a CPU): its size depends on the machine's load, its parts do not
    assert 0 < r.share.fraction < 1 and r.share.backward_us_per_step == 0.0
    assert r.share.us_per_step == pytest.approx(r.share.fraction * r.share.total_us_per_step)
    assert r.share.us_per_step == pytest.approx(r.share.forward_us_per_step)
    assert r.share.kernels_per_step == pytest.approx(5 * 22)  # 22 aten ops per LlamaRMSNorm call on a CPU
    text = r.problem.read_text()
    assert "# calls per step: 5 (1 per instance)" in text
    assert "hidden_states: (1, 128, 64) float32" in text  # batch 1 x seq 128 x hidden 64
    assert "from transformers.models.llama.modeling_llama import LlamaRMSNorm as _Module" in text
    mod = import_file(r.problem, "t")
    assert mod.get_init_inputs() == [64, 1e-05]
    (x,) = mod.get_inputs()
    assert x.shape == (1, 128, 64) and x.dtype == torch.float32
    assert r.selectors == ["module:LlamaRMSNorm & phase:forward"]


def test_model_loads_the_original_state_dict_and_computes_the_same(rmsnorm):
    spec = get_workload("llama-7b")
    step = spec.build(spec.resolve(TINY, "cpu"), torch.device("cpu"))
    orig = step.model.model.layers[1].post_attention_layernorm
    with torch.no_grad():
        orig.weight.uniform_(0.5, 1.5)  # not the initial ones: the state_dict really moves
    mod = import_file(rmsnorm.problem, "t2")
    m = mod.Model(*mod.get_init_inputs())
    m.load_state_dict(orig.state_dict(), strict=True)
    (x,) = mod.get_inputs()
    assert torch.equal(m(x), orig(x))


def test_verify_runs_the_extracted_problem_unchanged(rmsnorm, tmp_path, headroom, quick_verify_timing):
    honest = REPO / "examples" / "substitutions" / "llama_rmsnorm.py"
    zeros = Path(__file__).parent / "substitutions" / "zeros_rmsnorm.py"
    fast = ["--device", "cpu", "--rounds", "6", "--json"]
    p = headroom("verify", str(rmsnorm.problem), str(honest), *fast)
    r = json.loads(p.stdout)
    # correct on every check; the verdict is pass, or inconclusive when a 2-core CPU's timing noise
    # leaves the speed interval straddling 1 (exit 1 then, as for every verdict but pass)
    assert [c["name"] for c in r["checks"] if not c["passed"]] == [], r["reason"]
    assert r["problem"] == "llama-7b__LlamaRMSNorm" and r["verdict"] in ("pass", "inconclusive"), r["reason"]
    assert p.returncode == (0 if r["verdict"] == "pass" else 1)
    p = headroom("verify", str(rmsnorm.problem), str(zeros), *fast)
    r = json.loads(p.stdout)
    assert p.returncode == 1 and r["verdict"] == "fail"
    assert {"rel_l2", "allclose", "centred"} <= {c["name"] for c in r["checks"] if not c["passed"]}
    # ... and its result goes to project through the entry extract wrote
    vj = tmp_path / "verify.json"
    vj.write_text(json.dumps({"problem": "llama-7b__LlamaRMSNorm", "verdict": "pass", "speedup": 2.0}))
    trace = rmsnorm.entry.parent / "llama-7b__LlamaRMSNorm.trace.json.gz"
    p = headroom("project", str(trace), "--problems", str(rmsnorm.entry), "--speedups", str(vj), "--json")
    assert p.returncode == 0, p.stderr
    pj = json.loads(p.stdout)
    share = rmsnorm.share
    assert pj["entries"][0]["kernels"] == pytest.approx(share.kernels_per_step * pj["num_steps"])
    assert pj["selected_us"] == pytest.approx(share.us_per_step * pj["num_steps"], rel=1e-9)


def test_a_training_problem_is_forward_plus_backward(tmp_path):
    pytest.importorskip("torchrec")
    r = extract("dlrm", "InteractionArch", TINY, device="cpu", out=tmp_path, profile=False, command="t")
    assert r.selectors == ["module:InteractionArch & phase:forward", "module:InteractionArch & phase:backward"]
    text = r.problem.read_text()
    assert "share: not measured" in text and "forward_backward(self, super().forward" in text
    mod = import_file(r.problem, "t3")
    dense, sparse, grad = mod.get_inputs()
    assert dense.shape == (2048, 16) and sparse.shape == (2048, 26, 16) and grad.shape == (2048, 16 + 351)
    model = mod.Model(*mod.get_init_inputs())
    out, d_dense, d_sparse = model(dense, sparse, grad)
    assert out.shape == grad.shape and d_dense.shape == dense.shape and d_sparse.shape == sparse.shape
    # the candidate in the same form gives the same answer (what verify compares)
    cand = import_file(REPO / "examples" / "substitutions" / "dlrm_interaction.py", "t4")
    got = with_backward(cand.ModelNew)(26)(dense, sparse, grad)
    for a, b in zip(got, (out, d_dense, d_sparse)):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_channels_last_training_module_keeps_its_layout(tmp_path):
    # ResNet-50 trains channels-last: the problem stores its weights and makes its inputs that way,
    # and its forward is forward + backward; extract's own check ran it against the original.
    r = extract("resnet-50", "ResNetBottleNeckLayer", TINY, device="cpu", out=tmp_path, profile=False, command="t")
    text = r.problem.read_text()
    assert "self.to(memory_format=torch.channels_last)" in text
    assert ".contiguous(memory_format=torch.channels_last)" in text and "forward_backward(" in text
    mod = import_file(r.problem, "t6")
    x, grad = mod.get_inputs()
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    m = mod.Model(*mod.get_init_inputs())
    assert all(p.is_contiguous(memory_format=torch.channels_last) for p in m.parameters() if p.dim() == 4)


def test_forward_backward_returns_input_and_parameter_gradients():
    lin = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    g = torch.randn(4, 2)
    out, dx, dw, db = forward_backward(lin, lin.forward, (x,), (g,))
    assert torch.allclose(out, lin(x)) and torch.allclose(dx, g @ lin.weight)
    assert torch.allclose(dw, g.T @ x) and torch.allclose(db, g.sum(0))
    assert lin.weight.grad is None  # nothing accumulated


def test_op_problem_uses_the_recorded_shapes(tmp_path):
    r = extract("llama-7b", "op:aten::mul", TINY, device="cpu", out=tmp_path, command="t")
    assert r.name == "llama-7b__aten_mul" and r.selectors == ["op:aten::mul"]
    assert r.calls_per_step > 5
    mod = import_file(r.problem, "t5")
    xs = mod.get_inputs()
    assert all(isinstance(x, torch.Tensor) for x in xs) and len(xs) == 2
    assert torch.equal(mod.Model()(*xs), torch.mul(*xs))
    assert "calls per step:" in r.problem.read_text()


# --- values as code ------------------------------------------------------------------------------


def test_config_objects_dataclasses_and_dtypes_become_code_that_rebuilds_them():
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4)
    cfg._attn_implementation = "sdpa"
    src = Source()
    expr = literal(src, cfg, "LlamaMLP(config=...)")
    ns: dict = {}
    exec("import torch\n" + "\n".join(src.import_lines()) + "\n" + "\n".join(src.helpers), ns)
    again = eval(expr, ns)
    assert again.to_dict() == cfg.to_dict() and again._attn_implementation == "sdpa"
    assert literal(Source(), (torch.bfloat16, 1e-5, None, [1, 2]), "x") == "(torch.bfloat16, 1e-05, None, [1, 2])"
    with pytest.raises(UserError, match="a tensor constructor argument cannot be written"):
        literal(Source(), torch.ones(2), "Foo(w=...)")
    with pytest.raises(UserError, match="cannot be written as code"):
        literal(Source(), object(), "Foo(x=...)")


def test_tensor_expressions_keep_shapes_dtypes_and_index_bounds():
    e, seen = tensor_expr(TensorSpec((4, 7), "int64", lo=3.0, hi=26.0))
    t = eval(e, {"torch": torch})
    assert t.dtype == torch.int64 and t.shape == (4, 7) and int(t.min()) >= 3 and int(t.max()) <= 26
    assert seen == "seen: values in [3, 26]"
    e, _ = tensor_expr(TensorSpec((8, 16), "bfloat16", lo=-3.0, hi=3.0, mean=0.5, std=2.0))
    t = eval(e, {"torch": torch}).float()
    assert t.dtype == torch.float32 and abs(float(t.mean()) - 0.5) < 1.0
    e, _ = tensor_expr(TensorSpec((3,), "bool", lo=1.0, hi=1.0, mean=1.0))
    assert bool(eval(e, {"torch": torch}).all())


def test_constructor_arguments_bind_positionally_with_defaults_filled():
    class M(torch.nn.Module):
        def __init__(self, a, b=2, c=3):
            super().__init__()

    assert positional_init(M, Construction((1,), {"c": 9})) == [1, 2, 9]
    assert positional_init(M, Construction((1,), {})) == [1]
    assert [a.name for a in bind_init(M, Construction((), {"a": 5, "b": 6}))] == ["a", "b"]


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module,trace,message",
    [
        ("LlamaRMSNrom", None, "has no module of class LlamaRMSNrom; did you mean LlamaRMSNorm"),
        ("op:aten::no_such_op", None, "aten::no_such_op is not called in a 1-step profile"),
        ("op:mul", None, "expected op:aten::NAME"),
        ("LlamaRMSNorm", "/nonexistent.json.gz", "no such trace file"),
    ],
)
def test_extract_bad_input_is_one_line_and_writes_nothing(tmp_path, module, trace, message):
    with pytest.raises(UserError) as e:
        extract("llama-7b", module, TINY, device="cpu", out=tmp_path / "o", trace=trace, command="t")
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "o").exists()


def test_extract_cli_bad_input_exits_2_with_one_line(tmp_path):
    p = _cli(
        "extract",
        "llama-7b",
        "--flavour",
        "tiny",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "o"),
        "--module",
        "LlamaRMSNrom",
    )
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("headroom: error:")]
    assert p.returncode == 2 and len(err) == 1 and "did you mean LlamaRMSNorm" in err[0], p.stderr[-1500:]
    assert "Traceback" not in p.stderr and not (tmp_path / "o").exists()


def test_extract_refuses_an_out_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UserError, match="exists and is not a directory"):
        extract("llama-7b", "LlamaRMSNorm", TINY, device="cpu", out=f)


def test_extract_cli_json_and_a_trace_without_steps(rmsnorm, tmp_path):
    """`--json` is a `headroom.extract/1` document; a `--trace` without ProfilerStep ranges (a plain
    `with torch.profiler.profile():` capture) is analysed whole, with one warning on stderr and the same
    note in the document; `--window` picks its steps by a range name instead."""
    import gzip

    doc = json.loads(gzip.decompress(rmsnorm.trace.read_bytes()))
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(steps) == 1
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e not in steps]
    stepless = tmp_path / "stepless.json.gz"
    stepless.write_bytes(gzip.compress(json.dumps(doc).encode()))
    base = ("extract", "llama-7b", "--flavour", "tiny", "--device", "cpu", "--module", "LlamaRMSNorm", "--json")
    p = _cli(*base, "--out", str(tmp_path / "a"), "--trace", str(stepless))
    assert p.returncode == 0, p.stderr[-1500:]
    out = json.loads(p.stdout)
    assert out["schema"] == "headroom.extract/1" and out["name"] == "llama-7b__LlamaRMSNorm"
    warnings = [ln for ln in p.stderr.splitlines() if ln.startswith("headroom: warning:")]
    assert len(warnings) == 1 and "no ProfilerStep ranges: analysing the whole trace" in warnings[0]
    assert out["notes"] == [warnings[0].removeprefix("headroom: warning: ")]
    # the whole trace is the one step that was there: the same share as the trace with its step
    assert out["share"]["us_per_step"] == pytest.approx(rmsnorm.share.us_per_step)
    p = _cli(*base, "--out", str(tmp_path / "b"), "--window", "LlamaRMSNorm")
    err = [ln for ln in p.stderr.splitlines() if ln]
    assert p.returncode == 2 and err == ["headroom: error: --window picks the steps of --trace TRACE: give both"]
    assert not (tmp_path / "b").exists()


def test_extract_trace_of_another_workload_is_refused_not_a_share_of_0(tmp_path):
    """A trace where none of the module's instances ran (another workload) used to give "share 0.00%"
    and exit 0."""
    other = REPO / "traces" / "vit-b-16.infer.json.gz"
    with pytest.raises(
        UserError,
        match=r"--trace .*vit-b-16.infer.json.gz: no kernel of the 5 LlamaRMSNorm "
        r"instance\(s\) \(e.g. model.layers.0.input_layernorm\) is in this trace",
    ):
        extract("llama-7b", "LlamaRMSNorm", TINY, device="cpu", out=tmp_path / "o", trace=other, command="t")
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_extract_checks_a_read_only_out_before_the_build(tmp_path, monkeypatch):
    import headroom.extract.run as run

    def no_build(*a, **k):
        raise AssertionError("the workload was built before --out was checked")

    monkeypatch.setattr(run, "find_class", no_build)
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != tmp_path)  # root passes os.access
    with pytest.raises(UserError, match="cannot create the directory"):
        extract("llama-7b", "LlamaRMSNorm", TINY, device="cpu", out=tmp_path / "o", command="t")
