"""vit-b-16: transformers `ViTForImageClassification`, ViT-B/16 at 224 px, 1000 classes, random weights."""

from __future__ import annotations

from typing import Any

from headroom.profile import Default, RunConfig, Step, WorkloadSpec, register_workload
from headroom.workloads._hf import CPU_DTYPE, blocks_of, build_hf, encoder_step, meta_hf, weights_dtype

FLAVOURS: dict[str, dict[str, Any]] = {
    "default": dict(
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        image_size=224,
        patch_size=16,
    ),
    "large": dict(
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
        image_size=224,
        patch_size=16,
    ),
    "tiny": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=16
    ),
}


def vit_config(flavour: str, layers: int | None = None):
    from transformers import ViTConfig

    kw = dict(FLAVOURS[flavour], num_labels=1000)
    if layers is not None:
        kw["num_hidden_layers"] = layers
    return ViTConfig(**kw)


def _meta(flavour: str):
    from transformers import ViTForImageClassification

    return meta_hf(ViTForImageClassification, vit_config(flavour))


def _loss(call, inputs):
    return call(**inputs).loss


def build(cfg: RunConfig, device: Any) -> Step:
    import torch
    from transformers import ViTForImageClassification

    from headroom.workloads._hf import amp_dtype

    config = vit_config(cfg.flavour, cfg.layers)
    wdtype = weights_dtype(cfg)
    model = build_hf(ViTForImageClassification, config, device, wdtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    size = config.image_size
    pixels = torch.randn(cfg.batch, 3, size, size, generator=gen).to(device=device, dtype=wdtype)
    inputs = {"pixel_values": pixels}
    if cfg.mode == "train":
        inputs["labels"] = torch.randint(0, 1000, (cfg.batch,), generator=gen).to(device)
    blocks = blocks_of(model, "ViTLayer")
    return encoder_step(
        cfg,
        device,
        model,
        blocks,
        inputs,
        _loss,
        info={"attn_implementation": model.config._attn_implementation, "image_size": size, "amp": str(amp_dtype(cfg))},
    )


SPEC = register_workload(
    WorkloadSpec(
        name="vit-b-16",
        domain="vision",
        description="ViT-B/16 image classification inference at 224 px",
        model=(
            "transformers ViTForImageClassification, "
            "ViT-B/16 config (768 hidden, 12 layers, 16 px patches, 224 px, 1000 classes)"
        ),
        build=build,
        meta_model=_meta,
        modes=("infer", "train"),
        defaults={
            "mode": Default("infer", "ViT-B/16 is mostly used as a pretrained backbone for inference"),
            "batch": Default(128, "128 images x 197 tokens = 25k tokens per step fills an H200"),
            "seq": Default(None, "fixed: 224 px / 16 px patches = 196 patches + [CLS]"),
            "dtype": Default("bf16", "bf16 weights and activations, how HF vision models are served on Hopper"),
            "batch@train": Default(128, "a common per-GPU fine-tuning batch"),
        },
        flavours={
            "default": "ViT-B/16 (86.57M parameters)",
            "large": "ViT-L/16 (304M)",
            "tiny": "2 layers x 64 at 32 px, for CI",
        },
        num_layers=lambda f: FLAVOURS[f]["num_hidden_layers"],
        block="ViTLayer",
        seq_meaning="n/a (197 tokens per image)",
        cpu_scale={
            "batch": (2, "two images on a CPU"),
            "dtype": CPU_DTYPE,
        },
        parallel=("ddp", "fsdp"),
        source=__file__,
    )
)
