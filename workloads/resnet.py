"""resnet-50: transformers `ResNetForImageClassification` (ResNet-50, 1000 classes), random weights.

Training step the way ImageNet training runs: channels-last memory format,
bf16 autocast with fp32 weights, SGD with momentum, cross-entropy.
"""

from __future__ import annotations

from typing import Any

from headroom.profile import (
    Default,
    RunConfig,
    Step,
    WorkloadSpec,
    infer_forward,
    infer_step,
    parallelize,
    register_workload,
    train_forward,
    train_step,
)
from headroom.workloads._hf import build_hf, meta_hf

FLAVOURS: dict[str, dict[str, Any]] = {
    "default": dict(depths=[3, 4, 6, 3], hidden_sizes=[256, 512, 1024, 2048], layer_type="bottleneck", image_size=224),
    "resnet-101": dict(
        depths=[3, 4, 23, 3], hidden_sizes=[256, 512, 1024, 2048], layer_type="bottleneck", image_size=224
    ),
    "tiny": dict(depths=[1, 1], hidden_sizes=[16, 32], embedding_size=8, layer_type="bottleneck", image_size=32),
}


def resnet_config(flavour: str):
    from transformers import ResNetConfig

    kw = {k: v for k, v in FLAVOURS[flavour].items() if k != "image_size"}
    return ResNetConfig(num_labels=1000, **kw)


def _meta(flavour: str):
    from transformers import ResNetForImageClassification

    return meta_hf(ResNetForImageClassification, resnet_config(flavour))


def build(cfg: RunConfig, device: Any) -> Step:
    import torch
    from transformers import ResNetForImageClassification

    config = resnet_config(cfg.flavour)
    train = cfg.mode == "train"
    low = cfg.torch_dtype != torch.float32
    wdtype = torch.float32 if train else cfg.torch_dtype
    model = build_hf(ResNetForImageClassification, config, device, wdtype, attn=None)
    model = model.to(memory_format=torch.channels_last)
    size = FLAVOURS[cfg.flavour]["image_size"]
    gen = torch.Generator(device="cpu").manual_seed(0)
    pixels = torch.randn(cfg.batch, 3, size, size, generator=gen).to(device=device, dtype=wdtype)
    pixels = pixels.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (cfg.batch,), generator=gen).to(device)
    info = {"memory_format": "channels_last", "image_size": size}
    # ImageNet training scripts (torchvision references, MLPerf) let cuDNN pick the fastest algorithms.
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    info["cudnn_benchmark"] = True

    def close() -> None:
        torch.backends.cudnn.benchmark = before

    if train:
        model.train()
        wrapped = parallelize(
            model, cfg, device, [(f"resnet.encoder.stages.{i}", s) for i, s in enumerate(model.resnet.encoder.stages)]
        )
        call = torch.compile(wrapped) if cfg.compile else wrapped
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
        info.update(optimizer="SGD momentum 0.9", amp=str(cfg.torch_dtype) if low else "none")
        loss = lambda: call(pixel_values=pixels, labels=labels).loss  # noqa: E731
        amp = cfg.torch_dtype if low else None
        fn = train_step(model, loss, opt, device_type=device.type, amp_dtype=amp)
        return Step(
            fn,
            model,
            info=info,
            close=close,
            train=True,
            forward=train_forward(loss, device_type=device.type, amp_dtype=amp),
        )
    model.eval()
    call = torch.compile(model) if cfg.compile else model
    return Step(
        infer_step(lambda: call(pixel_values=pixels)),
        model,
        info=info,
        close=close,
        forward=infer_forward(lambda: call(pixel_values=pixels).logits),
    )


SPEC = register_workload(
    WorkloadSpec(
        name="resnet-50",
        domain="vision",
        description="ResNet-50 ImageNet training step, bf16 autocast, channels-last",
        model="transformers ResNetForImageClassification, ResNet-50 (bottleneck [3,4,6,3], 1000 classes)",
        build=build,
        meta_model=_meta,
        modes=("train", "infer"),
        defaults={
            "mode": Default("train", "ResNet-50 is the standard training benchmark (MLPerf, DAWNBench)"),
            "batch": Default(256, "MLPerf-style per-GPU batch at 224 px"),
            "seq": Default(None, "images, not sequences: 224 x 224 px"),
            "dtype": Default("bf16", "AMP autocast to bf16 with fp32 master weights"),
        },
        flavours={
            "default": "ResNet-50 (25.56M parameters)",
            "resnet-101": "ResNet-101 (44.5M)",
            "tiny": "2 stages x 1 block at 32 px, for CI",
        },
        seq_meaning="n/a (224 x 224 images)",
        cpu_scale={
            "batch": (4, "four images on a CPU"),
            "dtype": ("fp32", "CPUs without AMX run bf16 convolutions far slower than fp32"),
        },
        parallel=("ddp", "fsdp"),
        source=__file__,
    )
)
