"""`hf:<hub id or local directory>`: a workload built from a Hugging Face configuration, random weights.

`headroom.profile.registry.get_workload` resolves `hf:` names here. The configuration comes from
`AutoConfig.from_pretrained` (a local directory with config.json, or transformers' own download and
cache); the class from its `architectures`, else from `--opt task=`. Construction, steps, module ranges
and `--layers` truncation are `workloads/_hf.py`'s, as for the registered transformers workloads.
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.profile import Default, RunConfig, Step, WorkloadSpec
from headroom.workloads._hf import (
    CPU_DTYPE,
    amp_dtype,
    blocks_of,
    build_hf,
    decoder_cpu_scale,
    decoder_lm_step,
    encoder_step,
    meta_hf,
    weights_dtype,
)

PREFIX = "hf:"
# --opt task= -> the transformers Auto class that builds it.
TASKS = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "image-classification": "AutoModelForImageClassification",
    "base": "AutoModel",
}


def load_config(ref: str) -> Any:
    """The configuration of a local directory (its config.json) or of a hub id; a UserError if none."""
    from transformers import AutoConfig

    path = Path(ref).expanduser()
    local = path.exists() or ref.startswith((".", "/", "~"))
    if local and not (path / "config.json").is_file():
        raise UserError(f"{PREFIX}{ref}: no config.json in {path}")
    try:
        return AutoConfig.from_pretrained(str(path) if local else ref)
    except Exception as e:  # OSError (no network, no such repo), ValueError (unknown model type, remote code)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{PREFIX}{ref}: cannot load its configuration: {first}") from None


def default_task(config: Any) -> str:
    """The task of a configuration that names no architecture: what its model type is mostly used for."""
    from transformers.models.auto import modeling_auto as ma

    kind = config.model_type
    if kind in ma.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        return "image-classification"
    if kind in ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "base"
    if kind in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal-lm"
    return "base"


def model_class(ref: str, config: Any, task: str | None) -> Any:
    """The class to build: config.json's first architecture transformers has, or the task's Auto class."""
    import transformers

    if task is None:
        archs = list(getattr(config, "architectures", None) or [])
        for name in archs:
            if isinstance(getattr(transformers, name, None), type):
                return getattr(transformers, name)
        if archs:
            raise UserError(f"{PREFIX}{ref}: {archs[0]} is not a transformers class (custom model code is not run)")
        task = default_task(config)
    if task not in TASKS:
        raise UserError(f"{PREFIX}{ref}: unknown --opt task={task}; use one of {', '.join(TASKS)}")
    auto = getattr(transformers, TASKS[task])
    try:
        return type(meta_hf(auto.from_config, copy.deepcopy(config)))
    except ValueError as e:
        raise UserError(
            f"{PREFIX}{ref}: task {task} has no {type(config).__name__} model ({str(e).splitlines()[0][:120]})"
        ) from None


def repeated_block(model: Any) -> str | None:
    """The class of the longest ModuleList of identical modules (the blocks `--layers` counts), or None."""
    import torch.nn as nn

    best: tuple[int, str | None] = (1, None)
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > best[0]:
            names = {type(m).__name__ for m in module}
            if len(names) == 1:
                best = (len(module), names.pop())
    return best[1]


def truncated(config: Any, layers: int | None, total: int | None) -> Any:
    """A copy of `config` with `layers` blocks (per-layer lists, such as `layer_types`, cut to match)."""
    config = copy.deepcopy(config)
    if layers is None or total is None or layers == total:
        return config
    for key, value in list(vars(config).items()):
        if isinstance(value, list) and len(value) == total and not key.startswith("_"):
            setattr(config, key, value[:layers])
    config.num_hidden_layers = layers
    return config


def input_kind(ref: str, config: Any, cls: Any) -> str:
    """text (input_ids) or image (pixel_values); a UserError for what headroom builds no inputs for."""
    if getattr(config, "is_encoder_decoder", False):
        raise UserError(
            f"{PREFIX}{ref}: {cls.__name__} is an encoder-decoder model; hf: builds decoder-only, "
            f"encoder and vision models"
        )
    params = inspect.signature(cls.forward).parameters
    if "input_ids" in params and "pixel_values" not in params:
        return "text"
    if "pixel_values" in params and "input_ids" not in params:
        return "image"
    raise UserError(
        f"{PREFIX}{ref}: {cls.__name__} takes {', '.join(list(params)[1:4])}...; hf: builds "
        f"inputs for text (input_ids) or image (pixel_values) models only"
    )


class HFModel:
    """One hf: configuration: its class, inputs, repeated block, and how to build a step from it."""

    def __init__(self, ref: str, config: Any, cls: Any):
        self.ref, self.config, self.cls = ref, config, cls
        self.inputs = input_kind(ref, config, cls)
        self.decoder = cls.__name__.endswith("ForCausalLM")
        self.block = repeated_block(self.meta())
        self.total = getattr(config, "num_hidden_layers", None) if self.block else None
        self.max_positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)

    def meta(self, config: Any = None) -> Any:
        return meta_hf(self.cls, copy.deepcopy(config or self.config))

    def build(self, cfg: RunConfig, device: Any) -> Step:
        task = cfg.extra.get("task") or ""
        cls = model_class(self.ref, self.config, task) if task else self.cls
        if task and cls.__name__.endswith("ForCausalLM") != self.decoder:
            raise UserError(
                f"{PREFIX}{self.ref}: --opt task={task} changes decoder to encoder or back; "
                f"give a config.json whose architectures name the model"
            )
        config = truncated(self.config, cfg.layers, self.total)
        if cfg.seq and self.max_positions and cfg.seq + (cfg.phase == "decode") > self.max_positions:
            raise UserError(f"{PREFIX}{self.ref}: --seq {cfg.seq} exceeds its {self.max_positions} positions")
        model = build_hf(cls, config, device, weights_dtype(cfg))
        blocks = blocks_of(model, self.block) if self.block else []
        if cfg.layers is not None and len(blocks) != cfg.layers:
            raise UserError(
                f"{PREFIX}{self.ref}: --layers {cfg.layers} built {len(blocks)} blocks "
                f"(its layer count is not num_hidden_layers)"
            )
        info = {"class": cls.__name__, "attn_implementation": model.config._attn_implementation}
        experts = getattr(model.config, "_experts_implementation", None)
        if experts:
            info["experts_implementation"] = experts
        if self.decoder:
            return decoder_lm_step(
                cfg, device, model, blocks, config.vocab_size, info=info, max_positions=self.max_positions
            )
        inputs = self.make_inputs(cfg, config, device, model)
        info["amp"] = str(amp_dtype(cfg))
        return encoder_step(cfg, device, model, blocks, inputs, _loss, info=info)

    def make_inputs(self, cfg: RunConfig, config: Any, device: Any, model: Any) -> dict[str, Any]:
        """Random inputs (and, for training, labels where the model takes them) made once on the device."""
        import torch

        gen = torch.Generator(device="cpu").manual_seed(0)
        params = inspect.signature(model.forward).parameters
        if self.inputs == "image":
            size = _pair(getattr(config, "image_size", 224))
            chans = int(getattr(config, "num_channels", 3))
            pixels = torch.randn(cfg.batch, chans, *size, generator=gen)
            inputs = {"pixel_values": pixels.to(device=device, dtype=weights_dtype(cfg))}
        else:
            ids = torch.randint(0, config.vocab_size, (cfg.batch, cfg.seq or 1), generator=gen)
            inputs = {"input_ids": ids.to(device)}
            if "attention_mask" in params:  # what a tokenizer returns for unpadded text
                inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
        if cfg.mode == "train" and "labels" in params:
            name = type(model).__name__
            if name.endswith("ForMaskedLM"):
                inputs["labels"] = inputs["input_ids"]
            elif name.endswith("Classification"):
                n = int(getattr(config, "num_labels", 2))
                inputs["labels"] = torch.randint(0, n, (cfg.batch,), generator=gen).to(device)
        return inputs


def _pair(size: Any) -> tuple[int, int]:
    return (int(size[0]), int(size[1])) if isinstance(size, (list, tuple)) else (int(size), int(size))


def _loss(call: Any, inputs: dict[str, Any]) -> Any:
    """The model's own loss where it has labels; else a squared norm of its first output (a full backward)."""
    out = call(**inputs)
    loss = getattr(out, "loss", None)
    return loss if loss is not None else out[0].float().square().mean()


def _defaults(m: HFModel) -> dict[str, Default]:
    cap = lambda n: min(n, m.max_positions) if m.max_positions else n  # noqa: E731
    if m.decoder:
        return {
            "mode": Default("infer", "serving is where a causal LM spends its GPU time"),
            "phase": Default("prefill", "the compute-bound phase; --phase decode for the launch-bound one"),
            "batch": Default(4, "4 x 2048 = 8192 tokens per step, as llama-7b"),
            "seq": Default(cap(2048), "a long prompt (capped at the model's positions)"),
            "dtype": Default("bf16", "how LLMs are served"),
            "kv_cache@prefill": Default("dynamic", "a plain forward builds HF's DynamicCache"),
            "kv_cache@decode": Default("static", "StaticCache: fixed shapes, as serving engines run decode"),
            "seq@decode": Default(cap(2048) - 1, "tokens already in the KV cache when a decode step runs"),
            "batch@train": Default(1, "one sequence: AdamW with fp32 master weights"),
        }
    if m.inputs == "image":
        return {
            "mode": Default("infer", "vision backbones are mostly served"),
            "batch": Default(128, "128 images fill a GPU, as vit-b-16"),
            "seq": Default(None, "fixed by the image size and patch size"),
            "dtype": Default("bf16", "how HF vision models are served on Hopper"),
        }
    return {
        "mode": Default("infer", "encoders are mostly served: classification, embeddings"),
        "batch": Default(256, "256 x 128 tokens per step, as bert-base"),
        "seq": Default(cap(128), "classification and embedding serving pads short texts to 128"),
        "dtype": Default("bf16", "bf16 weights and activations"),
    }


def _cpu_scale(m: HFModel) -> dict[str, Any]:
    if m.decoder:
        scale = decoder_cpu_scale()
    else:
        scale = {
            "dtype": CPU_DTYPE,
            "layers": (2, "2 of the blocks, extrapolated to all"),
            "batch": (2, "a CPU-sized batch"),
        }
    if not m.block:
        del scale["layers"]
    return scale


def hf_workload(name: str) -> WorkloadSpec:
    """The spec of `hf:<hub id or local directory>` (a UserError, one line, for what it cannot build)."""
    ref = name[len(PREFIX) :]
    if not ref:
        raise UserError(f"{PREFIX}: give a hub id or a local directory holding config.json")
    config = load_config(ref)
    m = HFModel(ref, config, model_class(ref, config, None))
    total = m.total
    return WorkloadSpec(
        name=name,
        domain="vision" if m.inputs == "image" else "transformer",
        description=f"{m.cls.__name__} built from {ref}'s configuration, random weights",
        model=f"transformers {m.cls.__name__} ({config.model_type}), configuration from {ref}",
        build=m.build,
        meta_model=lambda flavour: m.meta(),
        modes=("infer", "train"),
        phases=("prefill", "decode") if m.decoder else (),
        kv_caches=("static", "dynamic") if m.decoder else (),
        defaults=_defaults(m),
        extras={"task": Default("", f"the class config.json names ({m.cls.__name__}); or one of {', '.join(TASKS)}")},
        flavours={"default": "the configuration as given"},
        num_layers=(lambda f: total) if total else None,
        block=m.block or "",
        seq_meaning="prompt tokens (prefill) / tokens in the KV cache (decode)" if m.decoder else "tokens per sequence",
        cpu_scale=_cpu_scale(m),
        parallel=("fsdp", "ddp"),
        source=str(Path(ref).resolve()) if Path(ref).exists() else ref,
    )
