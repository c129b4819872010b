"""gpt2-xl: transformers `GPT2LMHeadModel` with the GPT-2 XL (1.5B) configuration, random weights."""

from __future__ import annotations

from typing import Any

from headroom.profile import Default, RunConfig, Step, WorkloadSpec, register_workload
from headroom.workloads._hf import blocks_of, build_hf, decoder_cpu_scale, decoder_lm_step, meta_hf, weights_dtype

FLAVOURS: dict[str, dict[str, Any]] = {
    "default": dict(n_embd=1600, n_layer=48, n_head=25, n_positions=1024, vocab_size=50257),  # GPT-2 XL
    "large": dict(n_embd=1280, n_layer=36, n_head=20, n_positions=1024, vocab_size=50257),  # GPT-2 Large
    "tiny": dict(n_embd=64, n_layer=2, n_head=4, n_positions=256, vocab_size=512),
}


def gpt2_config(flavour: str, layers: int | None = None):
    from transformers import GPT2Config

    kw = dict(FLAVOURS[flavour])
    if layers is not None:
        kw["n_layer"] = layers
    if kw["vocab_size"] < 50257:
        kw.update(bos_token_id=0, eos_token_id=0)
    return GPT2Config(**kw)


def _meta(flavour: str):
    from transformers import GPT2LMHeadModel

    return meta_hf(GPT2LMHeadModel, gpt2_config(flavour))


def build(cfg: RunConfig, device: Any) -> Step:
    from transformers import GPT2LMHeadModel

    config = gpt2_config(cfg.flavour, cfg.layers)
    if cfg.seq + (1 if cfg.phase == "decode" else 0) > config.n_positions:
        from headroom.errors import UserError

        room = " (decode needs room for new tokens)" if cfg.phase == "decode" else ""
        raise UserError(f"gpt2-xl: --seq {cfg.seq} exceeds GPT-2's {config.n_positions} positions{room}")
    model = build_hf(GPT2LMHeadModel, config, device, weights_dtype(cfg))
    blocks = blocks_of(model, "GPT2Block")
    return decoder_lm_step(
        cfg,
        device,
        model,
        blocks,
        config.vocab_size,
        info={"attn_implementation": model.config._attn_implementation},
        max_positions=config.n_positions,
    )


SPEC = register_workload(
    WorkloadSpec(
        name="gpt2-xl",
        domain="transformer",
        description="GPT-2 XL causal LM, prefill over a full 1024-token context",
        model="transformers GPT2LMHeadModel, GPT-2 XL config (1600 hidden, 48 layers, 25 heads, 50257 vocab, tied head)",
        build=build,
        meta_model=_meta,
        modes=("infer", "train"),
        phases=("prefill", "decode"),
        kv_caches=("dynamic", "static"),
        defaults={
            "mode": Default("infer", "GPT-2 XL is run for generation and scoring, rarely trained now"),
            "phase": Default("prefill", "the full-context forward; --phase decode for token-by-token"),
            "batch": Default(8, "8 x 1024 tokens: enough to fill an H200 with a 1.5B model"),
            "seq": Default(1024, "GPT-2's full context"),
            "dtype": Default("bf16", "how GPT-2 is served on Hopper"),
            "kv_cache@prefill": Default("dynamic", "HF's default cache"),
            "kv_cache@decode": Default("dynamic", "HF's default cache for GPT-2 generate()"),
            "seq@decode": Default(512, "tokens already in the cache; leaves room under 1024 positions"),
            "batch@train": Default(4, "4 x 1024 tokens with AdamW fp32 master weights"),
        },
        flavours={
            "default": "GPT-2 XL (1.56B parameters)",
            "large": "GPT-2 Large (774M)",
            "tiny": "2 layers x 64, for CI",
        },
        num_layers=lambda f: FLAVOURS[f]["n_layer"],
        block="GPT2Block",
        cpu_scale=decoder_cpu_scale("shorter context for a CPU"),
        parallel=("ddp", "fsdp"),
        source=__file__,
    )
)
