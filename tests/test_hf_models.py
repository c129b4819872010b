"""`hf:<hub id or directory>` workloads (workloads/_hf_config.py): real-size configs' parameter counts on the
meta device against the published numbers, tiny configs of 7 architectures profiled, classified, extracted
and validated on the CPU, and bad input refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headroom.errors import UserError
from headroom.extract import extract
from headroom.profile.registry import get_workload
from headroom.profile.run import profile_workload
from headroom.profile.workload import Options, file_stem

REPO = Path(__file__).resolve().parents[1]
HF = REPO / "tests" / "data" / "hf"
FAST = dict(device="cpu", steps=1, warmup=1, timed_steps=1)


def hf(name: str) -> str:
    return f"hf:{HF / name}"


# config directory -> (published parameter count, the digits the model card gives it to, repeated block, layers)
PUBLISHED = {
    "llama-3-8b": (8.03e9, 1e7, "LlamaDecoderLayer", 32),  # meta-llama/Meta-Llama-3-8B: 8.03B
    "mistral-7b": (7.24e9, 1e7, "MistralDecoderLayer", 32),  # mistralai/Mistral-7B-v0.1: 7.24B
    "mixtral-8x7b": (46.7e9, 1e8, "MixtralDecoderLayer", 32),  # mistralai/Mixtral-8x7B-v0.1: 46.7B
    "qwen2-7b": (7.62e9, 1e7, "Qwen2DecoderLayer", 28),  # Qwen/Qwen2-7B: 7.62B
    "qwen1.5-moe-a2.7b": (14.3e9, 1e8, "Qwen2MoeDecoderLayer", 24),  # Qwen/Qwen1.5-MoE-A2.7B: 14.3B
    "bert-base-uncased": (110e6, 1e6, "BertLayer", 12),  # google-bert/bert-base-uncased: 110M
    "vit-base-patch16-224": (86.6e6, 1e5, "ViTLayer", 12),  # google/vit-base-patch16-224: 86.6M
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_real_size_configs_count_the_published_parameters_on_the_meta_device(name):
    published, digit, block, layers = PUBLISHED[name]
    spec = get_workload(hf(name))
    assert abs(spec.param_count_meta() - published) <= digit / 2, spec.param_count_meta()
    assert spec.block == block and spec.num_layers is not None and spec.num_layers("default") == layers


def test_exact_counts_of_the_shipped_configs():
    # what transformers builds from them, to the parameter (Llama-3-8B's card: 8,030,261,248)
    assert get_workload(hf("llama-3-8b")).param_count_meta() == 8_030_261_248
    assert get_workload(hf("mixtral-8x7b")).param_count_meta() == get_workload("mixtral-8x7b").param_count_meta()


# tiny config -> (options, categories that must be there)
TINY = {
    "tiny-llama-3-8b": (dict(seq=32), {"gemm", "attention", "embedding"}),
    "tiny-mistral-7b": (dict(seq=32), {"gemm", "attention"}),
    "tiny-qwen2-7b": (dict(seq=32), {"gemm", "attention"}),
    "tiny-mixtral-8x7b": (dict(seq=32), {"gemm", "attention", "routing", "permute"}),
    "tiny-qwen1.5-moe-a2.7b": (dict(seq=32), {"gemm", "attention", "routing", "permute"}),
    "tiny-bert-base-uncased": (dict(seq=32), {"gemm", "attention", "embedding"}),
    "tiny-vit-base-patch16-224": ({}, {"gemm", "conv"}),
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_configs_profile_and_classify_on_the_cpu(tmp_path, name):
    opts, categories = TINY[name]
    r = profile_workload(hf(name), Options(**opts), out=tmp_path, **FAST)
    assert r.trace_path.name.startswith(f"hf-{name}.infer")
    assert categories <= set(r.analysis.events["category"])
    assert r.manifest["workload"] == hf(name)
    # module ranges: the blocks and their classes are in the trace
    block = get_workload(hf(name)).block
    assert any(block in s for s in r.analysis.events["module_stack"].astype(str))


def test_decode_train_and_layers_run_through_hf(tmp_path):
    name = hf("tiny-qwen2-7b")
    d = profile_workload(name, Options(phase="decode", seq=16), out=tmp_path, **FAST)
    assert d.config.kv_cache == "static" and d.trace_path.name == "hf-tiny-qwen2-7b.infer.decode.static-cache.json.gz"
    t = profile_workload(name, Options(mode="train", seq=16, layers=1), out=tmp_path, **FAST)
    assert t.config.layers == 1 and t.config.total_layers == 2
    assert "optimizer" in set(t.analysis.events["category"])
    assert t.layers is not None  # extrapolated from 1 block to 2 (qwen2's per-layer layer_types cut to match)
    b = profile_workload(hf("tiny-bert-base-uncased"), Options(mode="train", seq=16), out=tmp_path, **FAST)
    assert b.manifest["info"]["class"] == "BertForMaskedLM"


def test_the_cpu_scaling_of_a_real_size_config():
    cfg = get_workload(hf("llama-3-8b")).resolve(Options(), "cpu")
    assert (cfg.layers, cfg.total_layers, cfg.seq, cfg.batch, cfg.dtype) == (2, 32, 128, 1, "float32")
    gpu = get_workload(hf("llama-3-8b")).resolve(Options(layers=8), "cuda")
    assert (gpu.layers, gpu.seq, gpu.batch, gpu.dtype, gpu.phase) == (8, 2048, 4, "bfloat16", "prefill")


# tiny config -> (a class to extract and validate, its module in transformers)
PARTS = {
    "tiny-llama-3-8b": ("LlamaRMSNorm", "llama"),
    "tiny-mistral-7b": ("MistralRMSNorm", "mistral"),
    "tiny-qwen2-7b": ("Qwen2RMSNorm", "qwen2"),
    "tiny-mixtral-8x7b": ("MixtralTopKRouter", "mixtral"),
    "tiny-qwen1.5-moe-a2.7b": ("Qwen2MoeSparseMoeBlock", "qwen2_moe"),
    "tiny-bert-base-uncased": ("BertIntermediate", "bert"),
    "tiny-vit-base-patch16-224": ("ViTAttention", "vit"),
}


@pytest.mark.parametrize("name", sorted(PARTS))
def test_extract_through_hf(tmp_path, name):
    cls = PARTS[name][0]
    opts = Options() if "vit" in name else Options(seq=16)
    r = extract(hf(name), cls, opts, device="cpu", out=tmp_path, command="headroom extract test")
    assert r.name == f"hf-{name}__{cls}" and r.calls_per_step >= 1
    text = r.problem.read_text()  # a KernelBench problem that builds the class on its own
    assert "class Model" in text and "def get_inputs" in text and "def get_init_inputs" in text
    assert not any(line.lstrip().startswith(("import headroom", "from headroom")) for line in text.splitlines())


@pytest.mark.slow  # a whole validate run per architecture (~25 s each on 2 cores); `make test-slow`
@pytest.mark.parametrize(
    "name",
    ["tiny-llama-3-8b", "tiny-qwen2-7b", "tiny-mixtral-8x7b", "tiny-bert-base-uncased", "tiny-vit-base-patch16-224"],
)
def test_validate_through_hf(tmp_path, name):
    cls, module = PARTS[name]
    candidate = tmp_path / "identity.py"  # the class itself: validate measures about 1x and keeps every output
    candidate.write_text(
        f"from transformers.models.{module}.modeling_{module} import {cls}\n\n\nclass ModelNew({cls}):\n    pass\n"
    )
    out = tmp_path / "v"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "headroom.cli",
            "validate",
            hf(name),
            "--device",
            "cpu",
            *([] if "vit" in name else ["--seq", "16"]),
            "--replace",
            f"{cls}={candidate}",
            "--out",
            str(out),
            "--rounds",
            "6",
            "--max-rounds",
            "6",
            "--timing-budget",
            "10",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["workload"] == hf(name) and doc["replacements"][0]["instances"] >= 1


def test_file_stem():
    assert file_stem("hf:meta-llama/Meta-Llama-3-8B") == "hf-Meta-Llama-3-8B"
    assert file_stem("hf:/models/qwen2/") == "hf-qwen2" and file_stem("llama-7b") == "llama-7b"


def test_tables_name_an_hf_model_as_its_file_is_named():
    from headroom.trace.analysis_result import run_name

    assert run_name({"workload": "hf:tests/data/hf/llama-3-8b"}) == "hf:llama-3-8b"
    assert run_name({"workload": "hf:Qwen/Qwen2-7B/"}) == "hf:Qwen2-7B"
    assert run_name({"workload": "hf:gpt2"}) == "hf:gpt2" and run_name({"workload": "llama-7b"}) == "llama-7b"


@pytest.mark.parametrize(
    "config, message",
    [
        (None, "no config.json in"),
        (
            {
                "architectures": ["T5ForConditionalGeneration"],
                "model_type": "t5",
                "d_model": 64,
                "num_layers": 1,
                "num_heads": 2,
                "d_ff": 64,
                "vocab_size": 64,
            },
            "is an encoder-decoder model",
        ),
        ({"architectures": ["MyNetForCausalLM"], "model_type": "mynet"}, "cannot load its configuration"),
        ({"architectures": ["MyLlamaForCausalLM"], "model_type": "llama"}, "is not a transformers class"),
    ],
)
def test_unsupported_input_is_refused_in_one_line(tmp_path, config, message):
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match=message) as e:
        get_workload(f"hf:{tmp_path}")
    assert "\n" not in str(e.value)


def test_cli_exit_2_one_line_for_a_hub_id_without_network(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    p = subprocess.run(
        [sys.executable, "-m", "headroom.cli", "profile", "hf:no-such-org/no-such-model", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    lines = [x for x in p.stderr.splitlines() if x.startswith("headroom: error:")]
    assert len(lines) == 1 and "hf:no-such-org/no-such-model: cannot load its configuration" in lines[0]
