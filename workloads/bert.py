"""bert-base: transformers `BertModel` (BERT-base, uncased vocabulary), random weights, encoder inference."""

from __future__ import annotations

from typing import Any

from headroom.profile import Default, RunConfig, Step, WorkloadSpec, register_workload
from headroom.workloads._hf import blocks_of, build_hf, encoder_step, meta_hf, weights_dtype

FLAVOURS: dict[str, dict[str, Any]] = {
    "default": dict(
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        vocab_size=30522,
        max_position_embeddings=512,
    ),
    "large": dict(
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
        vocab_size=30522,
        max_position_embeddings=512,
    ),
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=512,
        max_position_embeddings=128,
    ),
}


def bert_config(flavour: str, layers: int | None = None):
    from transformers import BertConfig

    kw = dict(FLAVOURS[flavour])
    if layers is not None:
        kw["num_hidden_layers"] = layers
    return BertConfig(**kw)


def _meta(flavour: str):
    from transformers import BertModel

    return meta_hf(BertModel, bert_config(flavour))


def _loss(call, inputs):
    # BertModel has no task head: a squared-norm objective on the pooled output
    # gives a full backward through the encoder, as fine-tuning does.
    return call(**inputs).pooler_output.float().square().mean()


def build(cfg: RunConfig, device: Any) -> Step:
    import torch
    from transformers import BertModel

    from headroom.errors import UserError

    config = bert_config(cfg.flavour, cfg.layers)
    if cfg.seq > config.max_position_embeddings:
        raise UserError(f"bert-base: --seq {cfg.seq} exceeds BERT's {config.max_position_embeddings} positions")
    model = build_hf(BertModel, config, device, weights_dtype(cfg))
    gen = torch.Generator(device="cpu").manual_seed(0)
    inputs = {
        "input_ids": torch.randint(0, config.vocab_size, (cfg.batch, cfg.seq), generator=gen).to(device),
        # what a tokenizer returns for unpadded text
        "attention_mask": torch.ones(cfg.batch, cfg.seq, dtype=torch.long, device=device),
        "token_type_ids": torch.zeros(cfg.batch, cfg.seq, dtype=torch.long, device=device),
    }
    blocks = blocks_of(model, "BertLayer")
    return encoder_step(
        cfg, device, model, blocks, inputs, _loss, info={"attn_implementation": model.config._attn_implementation}
    )


SPEC = register_workload(
    WorkloadSpec(
        name="bert-base",
        domain="transformer",
        description="BERT-base encoder inference (classification / embedding serving)",
        model="transformers BertModel, BERT-base config (768 hidden, 12 layers, 12 heads, 3072 FFN, pooler)",
        build=build,
        meta_model=_meta,
        modes=("infer", "train"),
        defaults={
            "mode": Default("infer", "BERT-base is mostly served: classification, embeddings, reranking"),
            "batch": Default(256, "256 x 128 = 32k tokens per step fills an H200"),
            "seq": Default(128, "classification and embedding serving pads short texts to 128"),
            "dtype": Default("fp16", "BERT serving stacks (TensorRT, FasterTransformer) run fp16"),
            "batch@train": Default(32, "fine-tuning batch (BERT paper: 32)"),
        },
        flavours={
            "default": "BERT-base (109.5M parameters)",
            "large": "BERT-large (335M)",
            "tiny": "2 layers x 64, for CI",
        },
        num_layers=lambda f: FLAVOURS[f]["num_hidden_layers"],
        block="BertLayer",
        cpu_scale={
            "batch": (4, "a few sequences on a CPU"),
            "dtype": ("fp32", "CPUs without AMX run fp16/bf16 matmuls far slower than fp32"),
        },
        parallel=("ddp", "fsdp"),
        source=__file__,
    )
)
