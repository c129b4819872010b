"""torch.compile'd code by module (headroom/profile/compiled.py records, headroom/trace/compiled.py attributes).

The fast tests check the name matching and the common-ancestor rule on synthetic graphs; the slow ones
profile a tiny Llama compiled on the CPU once (Inductor's CPU kernels recorded by the profiler) and check
that `targets --by module` places its compiled work.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from headroom.profile.compiled import dynamo_path
from headroom.trace.compiled import (
    BY_NODES,
    BY_ORDER,
    REJECTED,
    CompiledMap,
    Graph,
    common_path,
    kernel_paths,
    match_call,
    node_tokens,
)


@pytest.mark.parametrize(
    "key, path",
    [
        ("L['self']", ""),
        ("L['self'].model.layers.0.mlp", "model.layers.0.mlp"),
        ("L['args'][0].model.layers.3.self_attn.q_proj", "model.layers.3.self_attn.q_proj"),
        ("L['self'].layers[0].mlp", "layers.0.mlp"),
        ("getattr(L['self'].layers, '0').mlp", "layers.0.mlp"),
        ("L['fn']._modules['blocks']._modules['2']", "blocks.2"),
        ("G['__import_transformers'].apply_rotary_pos_emb", None),
    ],
)
def test_dynamo_paths(key, path):
    assert dynamo_path(key) == path


def test_node_tokens_longest_first_and_unknown_parts_skipped():
    nodes = {"add", "add_1", "index_put_1", "_scaled_dot_product_flash_attention_for_cpu", "copy_", "copy__3", "mul_12"}
    fused = "add_1_index_put_1__scaled_dot_product_flash_attention_for_cpu_copy__3_unknown_7_mul_12"
    assert node_tokens(fused, nodes) == [
        "add_1",
        "index_put_1",
        "_scaled_dot_product_flash_attention_for_cpu",
        "copy__3",
        "mul_12",
    ]


def test_common_path_stops_at_a_recorded_module():
    known = ("model", "model.layers.3", "model.layers.4", "model.layers.4.input_layernorm")
    assert common_path(["model.layers.4.input_layernorm"], known) == "model.layers.4.input_layernorm"
    # The residual add of layer 3 and the norm of layer 4: `model.layers` is a ModuleList (not recorded).
    assert common_path(["model.layers.3", "model.layers.4.input_layernorm"], known) == "model"
    assert common_path([], known) == ""


def _graph(nodes: dict[str, str], views: tuple[str, ...] = (), externs=(), compile_id: str = "0/0") -> Graph:
    paths = tuple(dict.fromkeys(p for p in nodes.values() if p is not None))
    return Graph(
        compile_id,
        paths,
        tuple(p.rsplit(".", 1)[-1] for p in paths),
        {n: paths.index(p) if p is not None else -1 for n, p in nodes.items()},
        frozenset(views),
        tuple(externs),
    )


def test_kernel_module_from_its_own_computing_nodes():
    norm3, norm4, layer3 = "model.layers.3.input_layernorm", "model.layers.4.input_layernorm", "model.layers.3"
    g = _graph(
        {
            "embedding": "model.embed_tokens",
            "add_8": layer3,
            "view_13": "model.layers.3.o_proj",
            "mean_2": norm4,
            "rsqrt_2": norm4,
            "mul_13": norm4,
            "mean_1": norm3,
            "mul_9": norm3,
            "add_11": layer3,
            "mul_14": norm4,
            "iota": "model",
            "copy_": None,
        },
        views=("view_13",),
    )
    names = {
        # the embedding lookup and the residual add recomputed in each norm kernel: shared, they do not decide
        "graph_0_cpp_fused_mean_1_embedding_add_8_mul_9_0": norm3,
        "triton_red_fused_mean_2_embedding_add_8_view_13_rsqrt_2_mul_13_1": norm4,
        # the residual add of layer 3 and the norm of layer 4: their deepest common recorded module
        "triton_poi_fused_add_11_mul_14_2": "model",
        # nodes without a module (an input's copy-back) do not decide
        "triton_poi_fused_copy__add_8_3": layer3,
        "triton_poi_fused_nothing_known_4": None,
    }
    cmap = CompiledMap("model", "LlamaForCausalLM", (g,))
    assert kernel_paths(cmap, set(names)) == names


def test_kernel_names_match_the_graph_that_holds_their_nodes():
    fwd = _graph({"mm": "a", "mul_1": "a.b"}, compile_id="0/0")
    bwd = _graph({"mm_3": "c", "mul_7": "c.d"}, compile_id="0/0")
    cmap = CompiledMap("model", "M", (fwd, bwd))
    assert kernel_paths(cmap, {"triton_poi_fused_mul_7_0", "triton_poi_fused_mul_1_0"}) == {
        "triton_poi_fused_mul_7_0": "c.d",
        "triton_poi_fused_mul_1_0": "a.b",
    }


def test_extern_ops_matched_per_name_in_order():
    externs = (
        ("mm", "aten::mm", ()),
        ("index_put", "aten::index_put", ()),
        ("mm_1", "aten::mm", ()),
        ("sdpa", "aten::_scaled_dot_product_flash_attention_for_cpu", ()),
        ("mm_2", "aten::mm", ()),
    )
    g = _graph({"mm": "q", "index_put": "attn", "mm_1": "k", "sdpa": "attn", "mm_2": "o"}, externs=externs)
    # the index_put was lowered into a kernel: it runs no op, and the others still match
    gi, at = match_call(["aten::mm", "aten::mm", "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::mm"], (g,))
    assert gi == 0 and at.tolist() == [0, 2, 3, 4]
    gi, at = match_call(["aten::bmm"], (g,))
    assert gi == -1 and (at == -1).all()


# --- a compiled tiny Llama on the CPU -------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory):
    pytest.importorskip("transformers")
    from headroom.profile.run import profile_workload
    from headroom.profile.workload import Options

    out = tmp_path_factory.mktemp("compiled")
    r = profile_workload(
        "llama-7b", Options(flavour="tiny", compile=True, phase="decode", batch=1), device="cpu", out=out
    )
    return r


def _in_compiled_calls(a) -> np.ndarray:
    return (a.events["compiled"] != "").to_numpy()


@pytest.mark.slow
def test_compiled_trace_has_modules(compiled_run):
    from headroom.projection.targets import module_targets

    a = compiled_run.analysis
    graphs = compiled_run.manifest["compiled_modules"]["graphs"]
    assert graphs and compiled_run.manifest["compiled_modules"]["root"] == "model"
    ev = a.events
    compiled = _in_compiled_calls(a)
    us = ev["dur"].to_numpy(dtype=float)
    assert compiled.any()
    lost = compiled & (ev["module"] == "").to_numpy()
    assert us[lost].sum() <= 0.01 * us[compiled].sum()
    assert (ev["compiled"] == BY_NODES).any() and (ev["compiled"] == BY_ORDER).any()
    assert any("compiled code by module" in n for n in a.notes)
    rows = module_targets(a, grouping="module_path", top=None)
    assert "model.model.layers.0.mlp.down_proj" in set(rows["name"])


@pytest.mark.slow
def test_the_norms_kernel_goes_to_the_norm(compiled_run):
    ev = compiled_run.analysis.events
    g = compiled_run.manifest["compiled_modules"]["graphs"][0]
    paths = [m[0] for m in g["modules"]]
    norm = "model.layers.0.input_layernorm"
    reductions = [n for n, i in g["nodes"].items() if i >= 0 and paths[i] == norm and n.startswith("mean")]
    assert reductions, "the first norm's mean is a node of the graph"
    kernels = ev[(ev["compiled"] == BY_NODES).to_numpy()]
    hit = kernels[[any(t == reductions[0] for t in node_tokens(n, set(g["nodes"]))) for n in kernels["name"]]]
    assert len(hit)
    assert set(hit["module"]) <= {f"model.{norm}", "model.model.layers.0"}


def _mm_inputs(run, ev) -> list[tuple[str, tuple, tuple]]:
    from headroom.trace.op_inputs import op_calls

    trace = run.analysis.trace
    mm = trace.cpu_ops()
    mm = mm[(mm["name"].astype(str) == "aten::mm").to_numpy()]
    calls = op_calls(run.trace_path, mm["external_id"].tolist())
    by_ts = dict(zip(mm["ts"].to_numpy(dtype=float).tolist(), mm["external_id"].tolist()))
    rows = ev[(ev["name"] == "aten::mm").to_numpy()]
    out = []
    for module, ts in zip(rows["module"], rows["ts"].to_numpy(dtype=float)):
        c = calls[int(by_ts[ts])]
        out.append((module, c.tensor(0).shape, c.tensor(1).shape))
    return out


@pytest.mark.slow
def test_extern_gemms_go_to_their_projections(compiled_run):
    from headroom.workloads.llama import llama_config

    config = llama_config("tiny")
    h, f, v = config.hidden_size, config.intermediate_size, config.vocab_size
    sizes = {
        "q_proj": (h, h),
        "k_proj": (h, h),
        "v_proj": (h, h),
        "o_proj": (h, h),
        "gate_proj": (h, f),
        "up_proj": (h, f),
        "down_proj": (f, h),
        "lm_head": (h, v),
    }
    ev = compiled_run.analysis.events
    seen = _mm_inputs(compiled_run, ev)
    assert len(seen) == 7 * config.num_hidden_layers + 1
    for module, a, b in seen:
        name = module.rsplit(".", 1)[-1]
        assert name in sizes, module
        assert (a[-1], b[-1]) == sizes[name], (module, a, b)
    assert len({m for m, _, _ in seen}) == len(seen)  # each projection once


@pytest.mark.slow
def test_a_damaged_extern_order_is_rejected(compiled_run, tmp_path):
    from headroom.trace.analysis import analyze

    doc = json.loads(gzip.decompress(Path(compiled_run.trace_path).read_bytes()))
    externs = doc["headroom"]["compiled_modules"]["graphs"][0]["externs"]
    mm = [i for i, e in enumerate(externs) if e[1] == "aten::mm"]
    shuffled = [externs[i] for i in mm]
    np.random.default_rng(0).shuffle(shuffled)
    for i, e in zip(mm, shuffled):
        externs[i] = e
    damaged = tmp_path / "damaged.json.gz"
    damaged.write_bytes(gzip.compress(json.dumps(doc).encode()))
    ev = analyze(damaged, use_cache=False).events
    gemms = ev[(ev["name"] == "aten::mm").to_numpy()]
    assert len(gemms) and set(gemms["compiled"]) == {REJECTED}
    assert set(gemms["module"]) == {"model"}  # the compiled module, not a wrong projection
