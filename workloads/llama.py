"""llama-7b: transformers `LlamaForCausalLM` with the Llama-2-7B configuration, random weights.

Flavours give the other Llama sizes (13b, 70b, 405b) for `--layers` analysis on
one GPU, and `tiny` for CI.
"""

from __future__ import annotations

from typing import Any

from headroom.profile import Default, RunConfig, Step, WorkloadSpec, register_workload
from headroom.workloads._hf import blocks_of, build_hf, decoder_cpu_scale, decoder_lm_step, meta_hf, weights_dtype

# Published configurations (hidden, layers, heads, kv heads, intermediate, vocab, rope theta, max positions).
FLAVOURS: dict[str, dict[str, Any]] = {
    "default": dict(
        hidden_size=4096,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        intermediate_size=11008,
        vocab_size=32000,
        rope_theta=10000.0,
        max_position_embeddings=4096,
    ),
    "13b": dict(
        hidden_size=5120,
        num_hidden_layers=40,
        num_attention_heads=40,
        num_key_value_heads=40,
        intermediate_size=13824,
        vocab_size=32000,
        rope_theta=10000.0,
        max_position_embeddings=4096,
    ),
    "70b": dict(
        hidden_size=8192,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        intermediate_size=28672,
        vocab_size=32000,
        rope_theta=10000.0,
        max_position_embeddings=4096,
    ),
    "405b": dict(
        hidden_size=16384,
        num_hidden_layers=126,
        num_attention_heads=128,
        num_key_value_heads=8,
        intermediate_size=53248,
        vocab_size=128256,
        rope_theta=500000.0,
        max_position_embeddings=131072,
    ),
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=172,
        vocab_size=512,
        rope_theta=10000.0,
        max_position_embeddings=512,
    ),
}


def llama_config(flavour: str, layers: int | None = None):
    from transformers import LlamaConfig

    kw = dict(FLAVOURS[flavour], rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=0.02)
    if layers is not None:
        kw["num_hidden_layers"] = layers
    return LlamaConfig(**kw)


def _meta(flavour: str):
    from transformers import LlamaForCausalLM

    return meta_hf(LlamaForCausalLM, llama_config(flavour))


def build(cfg: RunConfig, device: Any) -> Step:
    from transformers import LlamaForCausalLM

    config = llama_config(cfg.flavour, cfg.layers)
    model = build_hf(LlamaForCausalLM, config, device, weights_dtype(cfg))
    blocks = blocks_of(model, "LlamaDecoderLayer")
    return decoder_lm_step(
        cfg, device, model, blocks, config.vocab_size, info={"attn_implementation": model.config._attn_implementation}
    )


SPEC = register_workload(
    WorkloadSpec(
        name="llama-7b",
        domain="transformer",
        description="Llama-2-7B causal LM: prefill, or decode against a KV cache",
        model="transformers LlamaForCausalLM, Llama-2-7B config (4096 hidden, 32 layers, 32 heads, 11008 FFN, 32000 vocab)",
        build=build,
        meta_model=_meta,
        modes=("infer", "train"),
        phases=("prefill", "decode"),
        kv_caches=("static", "dynamic"),
        defaults={
            "mode": Default("infer", "serving is where a 7B model spends its GPU time"),
            "phase": Default("prefill", "the compute-bound phase; --phase decode for the launch-bound one"),
            "batch": Default(4, "4 x 2048 = 8192 tokens per step fills an H200 in prefill"),
            "seq": Default(2048, "a long prompt, half of Llama-2's 4096 context"),
            "dtype": Default("bf16", "how Llama is served"),
            "kv_cache@prefill": Default(
                "dynamic", "a plain forward (and generate()'s first step) builds HF's DynamicCache"
            ),
            "kv_cache@decode": Default(
                "static", "StaticCache: fixed shapes, no per-token torch.cat of the whole cache"
            ),
            "batch@decode": Default(4, "same sequences as prefill: 4 streams decoding against a 2048-token context"),
            "seq@decode": Default(2048, "tokens already in the KV cache when a decode step runs"),
            "batch@train": Default(1, "one 2048-token sequence: AdamW with fp32 master weights needs ~110 GB"),
        },
        flavours={
            "default": "Llama-2-7B (6.74B parameters)",
            "13b": "Llama-2-13B (13.0B)",
            "70b": "Llama-2-70B, GQA 8 KV heads (69.0B); use --layers",
            "405b": "Llama-3.1-405B shape, GQA, 128256 vocab (406B); use --layers",
            "tiny": "2 layers x 64 hidden, for CI",
        },
        num_layers=lambda f: FLAVOURS[f]["num_hidden_layers"],
        block="LlamaDecoderLayer",
        seq_meaning="prompt tokens (prefill) / tokens in the KV cache (decode)",
        cpu_scale=decoder_cpu_scale(),
        parallel=("fsdp", "ddp"),
        source=__file__,
    )
)
