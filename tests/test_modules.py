"""Module ranges (headroom/profile/modules.py) and module attribution (headroom/trace/modules.py)
on a real 2-layer Llama from transformers, trained for a step on the CPU."""

from __future__ import annotations

import gzip
import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from headroom.profile.modules import record_module_ranges  # noqa: E402
from headroom.profile.nvtx import instrument_blocks  # noqa: E402
from headroom.trace.analysis import analyze  # noqa: E402
from headroom.trace.load import load_trace  # noqa: E402
from headroom.trace.modules import backward_links  # noqa: E402
from headroom.trace.ranges import parse_module_range  # noqa: E402


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=64,
        max_position_embeddings=64,
    )
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg)


def _profile(step, path, record_shapes=True):
    from torch.profiler import profile, schedule

    step()
    with profile(
        record_shapes=record_shapes,
        schedule=schedule(wait=0, warmup=1, active=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(2):
            step()
            prof.step()
    return path


@pytest.fixture(scope="module")
def train_trace(tmp_path_factory):
    """One training step of the tiny Llama, with module ranges, profiled on the CPU."""
    model = _tiny_llama().train()
    handles = record_module_ranges(model)
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(0))

    def step():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()

    path = _profile(step, tmp_path_factory.mktemp("modules") / "tiny.json")
    for h in handles:
        h.remove()
    return path, len(handles)


def test_a_range_per_call_of_each_module_that_does_work(train_trace):
    path, n_handles = train_trace
    a = analyze(path)
    calls = a.modules.groupby("module_type").size().to_dict()
    # 2 layers x (q, k, v, o, gate, up, down) + lm_head; 2 norms per layer + the final one.
    assert calls == {
        "LlamaForCausalLM": 1,
        "LlamaModel": 1,
        "Embedding": 1,
        "LlamaRotaryEmbedding": 1,
        "LlamaDecoderLayer": 2,
        "LlamaRMSNorm": 5,
        "LlamaAttention": 2,
        "Linear": 15,
        "LlamaMLP": 2,
        "SiLUActivation": 2,
    }
    assert n_handles == 2 * 32  # a pre-hook and a hook per module; the ModuleList gets none
    q = a.modules.set_index("path").loc["model.model.layers.1.self_attn.q_proj"]
    assert (q["module_type"], q["inputs"]) == ("Linear", "f32[1,8,32]")
    assert q["module_stack"] == "LlamaForCausalLM/LlamaModel/LlamaDecoderLayer/LlamaAttention/Linear"
    # The layer's inputs: hidden states, rotary (cos, sin) from a tuple argument, position ids.
    layer = a.modules.set_index("path").loc["model.model.layers.0"]
    assert layer["inputs"] == "f32[1,8,32] f32[1,8,16] f32[1,8,16] i64[1,8]"
    assert (a.modules["self_us"] <= a.modules["dur"]).all()


def test_forward_and_backward_ops_land_on_their_module(train_trace):
    ev = analyze(train_trace[0]).events
    q = ev[ev["module"] == "model.model.layers.1.self_attn.q_proj"]
    mm = q[q["name"] == "aten::mm"].groupby("phase").size().to_dict()
    # One GEMM forward; its backward node (MmBackward0) runs two: grad of the input and of the weight.
    assert mm == {"forward": 1, "backward": 2}
    assert set(q.loc[q["phase"] == "backward", "name"]) >= {"MmBackward0", "TBackward0", "aten::mm"}
    norm = ev[(ev["module"] == "model.model.layers.0.input_layernorm") & (ev["phase"] == "backward")]
    nodes = norm[norm["name"].str.fullmatch(r"\w+Backward\d")]
    assert sorted(nodes["name"]) == [
        "AddBackward0",
        "MeanBackward1",
        "MulBackward0",
        "MulBackward0",
        "PowBackward0",
        "RsqrtBackward0",
    ]
    assert set(norm["module_type"]) == {"LlamaRMSNorm"}
    # Every backward op has a module except autograd's gradient accumulation into the parameters.
    orphans = set(ev.loc[(ev["phase"] == "backward") & (ev["module_type"] == ""), "name"])
    assert orphans == {
        "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
        "torch::autograd::AccumulateGrad",
        "aten::detach",
        "detach",
    }
    by_type = ev[ev["phase"] == "backward"].groupby("module_type").size()
    assert by_type["Linear"] > by_type["LlamaRMSNorm"] > by_type["SiLUActivation"] > 0


def test_sequence_numbers_give_the_same_answer_without_flows(train_trace, tmp_path):
    path = train_trace[0]
    doc = json.loads(path.read_text())
    assert sum(e.get("cat") == "fwdbwd" for e in doc["traceEvents"]) == 310
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "fwdbwd"]
    bare = tmp_path / "noflows.json.gz"
    bare.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert backward_links(load_trace(bare))["via"].value_counts().to_dict() == {"sequence": 310}
    with_flows, without = analyze(path).events, analyze(bare).events
    assert (with_flows["module"] == "").sum() < len(with_flows) / 10
    for col in ("module", "module_type", "module_stack", "phase"):
        assert with_flows[col].tolist() == without[col].tolist()


def test_compiled_code_gets_no_ranges_no_graph_breaks_no_recompiles(tmp_path):
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    model = _tiny_llama().eval()
    record_module_ranges(model)
    ids = torch.randint(0, 64, (1, 8))
    dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager")
    with torch.inference_mode():
        path = _profile(lambda: compiled(input_ids=ids, use_cache=False), tmp_path / "c.json", record_shapes=False)
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1  # the profiler starting recompiled nothing
    names = [e.get("name", "") for e in json.loads(path.read_text())["traceEvents"]]
    assert not any(parse_module_range(n)[0] for n in names)


def test_containers_compiled_parts_and_nesting_with_block_ranges(tmp_path):
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.lin(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block(), Block()])
            self.head = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
            self.tail = torch.compile(nn.Linear(4, 4), backend="eager")

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.tail(self.head(x))

    net = Net()
    # `headroom profile`'s order: block ranges first, then module ranges (which nest inside them).
    handles = instrument_blocks([("net.blocks.0", net.blocks[0])], train=False)
    handles += record_module_ranges(net, root="net")
    x = torch.randn(2, 4)
    with torch.inference_mode():
        path = _profile(lambda: net(x), tmp_path / "n.json")
    ranges = [
        (e["name"], e["ts"], e["ts"] + e["dur"])
        for e in json.loads(path.read_text())["traceEvents"]
        if e.get("name", "").startswith("headroom/")
    ]
    modules = sorted(parse_module_range(n)[0] for n, _, _ in ranges if parse_module_range(n)[0])
    # No range for the ModuleList or the Sequential, none inside the compiled Linear's wrapper.
    assert modules == [
        "net",
        "net.blocks.0",
        "net.blocks.0.lin",
        "net.blocks.1",
        "net.blocks.1.lin",
        "net.head.0",
        "net.head.1",
    ]
    block = next(r for r in ranges if r[0] == "headroom/block net.blocks.0")
    module = next(r for r in ranges if r[0] == "headroom/module net.blocks.0 (Block)")
    assert block[1] <= module[1] and module[2] <= block[2]  # the module range nests inside the block's
    for h in handles:
        h.remove()
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in net.modules())


def test_a_forward_that_raises_closes_its_range(tmp_path):
    import torch.nn as nn

    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.boom, self.lin = Boom(), nn.Linear(1, 1)

        def forward(self, x):
            try:
                self.boom(x)
            except ValueError:
                pass
            return self.lin(x)

    net = Net()
    record_module_ranges(net)
    with torch.inference_mode():
        path = _profile(lambda: net(torch.ones(1)), tmp_path / "b.json")
    spans = {
        parse_module_range(e["name"])[0]: (e["ts"], e["ts"] + e["dur"])
        for e in json.loads(path.read_text())["traceEvents"]
        if e.get("name", "").startswith("headroom/module")
    }
    # The failed call's range was closed (recorded) before the next module's began.
    assert set(spans) == {"model", "model.boom", "model.lin"}
    assert spans["model.boom"][1] <= spans["model.lin"][0]
