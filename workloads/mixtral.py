"""mixtral-8x7b: transformers `MixtralForCausalLM` with the Mixtral-8x7B configuration, random weights.

A sparse Mixture-of-Experts decoder: each block routes every token to 2 of 8 expert MLPs
(`MixtralTopKRouter`: linear, softmax, top-k), sorts the tokens by expert and runs the experts'
GEMMs (`MixtralExperts`, transformers' experts implementation: `grouped_mm` by default).
The full model (46.7B) needs `--layers` on one GPU; `tiny` is for CI.
"""

from __future__ import annotations

from typing import Any

from headroom.profile import Default, RunConfig, Step, WorkloadSpec, register_workload
from headroom.workloads._hf import blocks_of, build_hf, decoder_cpu_scale, decoder_lm_step, meta_hf, weights_dtype

FLAVOURS: dict[str, dict[str, Any]] = {
    "default": dict(
        hidden_size=4096,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        intermediate_size=14336,
        vocab_size=32000,
        num_local_experts=8,
        num_experts_per_tok=2,
        rope_theta=1e6,
        max_position_embeddings=32768,
    ),
    "8x22b": dict(
        hidden_size=6144,
        num_hidden_layers=56,
        num_attention_heads=48,
        num_key_value_heads=8,
        intermediate_size=16384,
        vocab_size=32768,
        num_local_experts=8,
        num_experts_per_tok=2,
        rope_theta=1e6,
        max_position_embeddings=65536,
    ),
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=512,
        num_local_experts=4,
        num_experts_per_tok=2,
        rope_theta=1e6,
        max_position_embeddings=512,
    ),
}
# transformers' experts implementations (config.experts_implementation): grouped_mm sorts the tokens by
# expert and runs one grouped GEMM per projection; batched_mm gathers every token's k experts' weights;
# eager loops over the experts hit, one GEMM pair each.
EXPERTS = ("grouped_mm", "batched_mm", "eager")


def mixtral_config(flavour: str, layers: int | None = None, experts: str | None = None):
    from transformers import MixtralConfig

    kw = dict(
        FLAVOURS[flavour],
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        initializer_range=0.02,
        sliding_window=None,
        router_jitter_noise=0.0,
    )
    if layers is not None:
        kw["num_hidden_layers"] = layers
    config = MixtralConfig(**kw)
    if experts is not None:
        config._experts_implementation = experts
    return config


def _meta(flavour: str):
    from transformers import MixtralForCausalLM

    return meta_hf(MixtralForCausalLM, mixtral_config(flavour))


def build(cfg: RunConfig, device: Any) -> Step:
    from transformers import MixtralForCausalLM

    from headroom.errors import UserError

    experts = cfg.extra["experts"]
    if experts not in EXPERTS:
        raise UserError(f"mixtral-8x7b: --opt experts={experts}: use one of {', '.join(EXPERTS)}")
    config = mixtral_config(cfg.flavour, cfg.layers, experts)
    model = build_hf(MixtralForCausalLM, config, device, weights_dtype(cfg))
    blocks = blocks_of(model, "MixtralDecoderLayer")
    return decoder_lm_step(
        cfg,
        device,
        model,
        blocks,
        config.vocab_size,
        info={
            "attn_implementation": model.config._attn_implementation,
            "experts_implementation": getattr(model.config, "_experts_implementation", experts),
        },
    )


SPEC = register_workload(
    WorkloadSpec(
        name="mixtral-8x7b",
        domain="transformer",
        description="Mixtral-8x7B sparse MoE causal LM (top-2 of 8 experts): prefill, or decode against a KV cache",
        model="transformers MixtralForCausalLM, Mixtral-8x7B config (4096 hidden, 32 layers, 32 heads / 8 KV heads, "
        "8 experts x 14336 FFN, top-2, 32000 vocab)",
        build=build,
        meta_model=_meta,
        modes=("infer", "train"),
        phases=("prefill", "decode"),
        kv_caches=("static", "dynamic"),
        defaults={
            "mode": Default("infer", "Mixtral is served far more than it is trained"),
            "phase": Default("prefill", "the compute-bound phase; --phase decode for the launch- and memory-bound one"),
            "batch": Default(4, "4 x 2048 = 8192 tokens: about 2048 tokens per expert per block"),
            "seq": Default(2048, "a long prompt"),
            "dtype": Default("bf16", "how Mixtral is served"),
            "kv_cache@prefill": Default(
                "dynamic", "a plain forward (and generate()'s first step) builds HF's DynamicCache"
            ),
            "kv_cache@decode": Default(
                "static", "StaticCache: fixed shapes, no per-token torch.cat of the whole cache"
            ),
            "batch@train": Default(1, "one 2048-token sequence"),
        },
        extras={
            "experts": Default(
                "grouped_mm",
                "transformers' default experts implementation: tokens sorted by "
                "expert, one grouped GEMM per projection",
            )
        },
        flavours={
            "default": "Mixtral-8x7B (46.7B parameters, 12.9B active per token); use --layers on one GPU",
            "8x22b": "Mixtral-8x22B (141B); use --layers",
            "tiny": "2 layers x 64 hidden, 4 experts, for CI",
        },
        num_layers=lambda f: FLAVOURS[f]["num_hidden_layers"],
        block="MixtralDecoderLayer",
        seq_meaning="prompt tokens (prefill) / tokens in the KV cache (decode)",
        cpu_scale=decoder_cpu_scale(),
        parallel=("fsdp", "ddp"),
        source=__file__,
    )
)
