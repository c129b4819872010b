"""Shared building blocks for the transformers-based workloads (not a workload itself).

Works with transformers 5.17 and 5.24: the cache keyword was renamed from
`past_key_values` to `cache` in between; `cache_kwarg` picks the right one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from headroom.profile import (
    RunConfig,
    Step,
    infer_forward,
    infer_step,
    materialize,
    meta_parameters,
    parallelize,
    phase_range,
    train_forward,
    train_step,
)

# Positions kept free after the prompt in a decode cache: decode steps advance
# through them, and the cache is rewound to the prompt when they run out.
DECODE_HEADROOM_TOKENS = 256

CPU_DTYPE = ("fp32", "CPUs without AMX run bf16 matmuls ~100x slower than fp32")


def decoder_cpu_scale(seq_reason: str = "shorter prompt for a CPU") -> dict[str, Any]:
    """How a decoder LM runs on a CPU (`WorkloadSpec.cpu_scale`): 2 of its blocks, extrapolated to all;
    one sequence of 128 tokens; fp32."""
    return {
        "layers": (2, "2 of the blocks, extrapolated to all"),
        "seq": (128, seq_reason),
        "batch": (1, "one sequence on a CPU"),
        "dtype": CPU_DTYPE,
    }


def build_hf(model_cls: Any, config: Any, device: Any, dtype: Any = None, attn: str | None = "sdpa") -> Any:
    """Construct on the meta device (no memory, no init time), then materialise on `device`.

    `attn`: the attention implementation (HF's default, SDPA, which dispatches to
    FlashAttention on Hopper for unmasked bf16/fp16 attention); None for models without attention."""
    if attn:
        config._attn_implementation = attn
    with meta_parameters():
        model = model_cls(config)
    std = float(getattr(config, "initializer_range", 0.02))
    materialize(model, device, dtype=dtype, std=std)
    return model


def meta_hf(model_cls: Any, config: Any) -> Any:
    with meta_parameters():
        return model_cls(config)


def cache_kwarg(model: Any) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def weights_dtype(cfg: RunConfig) -> Any:
    """Inference runs with weights in --dtype (how HF models are served: `dtype=...`);
    training keeps fp32 master weights and autocasts to --dtype (AMP)."""
    import torch

    return cfg.torch_dtype if cfg.mode == "infer" else torch.float32


def amp_dtype(cfg: RunConfig) -> Any:
    import torch

    return None if cfg.mode == "infer" or cfg.torch_dtype == torch.float32 else cfg.torch_dtype


def blocks_of(model: Any, class_name: str) -> list[tuple[str, Any]]:
    """The repeated blocks: the elements of the ModuleList holding `class_name` modules
    (found by class, since module paths differ across transformers versions)."""
    import torch.nn as nn

    best: list[tuple[str, Any]] = []
    for path, module in model.named_modules():
        if isinstance(module, nn.ModuleList):
            items = [(f"{path}.{i}", b) for i, b in enumerate(module) if type(b).__name__ == class_name]
            if len(items) == len(module) and len(items) > len(best):
                best = items
    if not best:
        raise RuntimeError(f"{type(model).__name__}: no ModuleList of {class_name} blocks")
    return best


def compiled(model: Any, cfg: RunConfig, blocks: list[tuple[str, Any]]) -> Any:
    """What to call: the model, `torch.compile`d as a whole, or per block when the run
    extrapolates over layers (block ranges must stay outside compiled regions)."""
    if not cfg.compile:
        return model
    from headroom.profile import compile_model

    return compile_model(model, blocks, per_block=cfg.extrapolated, mode=cfg.compile_mode)


def make_optimizer(model: Any, device: Any) -> Any:
    import torch

    fused = device.type == "cuda"
    return torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0, fused=fused)


def rewind_cache(cache: Any, to: int, added: int) -> None:
    """Drop the last `added` positions of a KV cache (static: move the write position back,
    no memset; dynamic: `crop` with a negative count, as transformers 5.x wants)."""
    import torch

    layers = getattr(cache, "layers", [])
    static = [getattr(layer, "cumulative_length", None) for layer in layers]
    if layers and all(isinstance(c, torch.Tensor) for c in static):
        for c in static:
            c.fill_(to)
    else:
        cache.crop(-added)


def decoder_lm_step(
    cfg: RunConfig,
    device: Any,
    model: Any,
    blocks: list[tuple[str, Any]],
    vocab: int,
    info: dict[str, Any],
    max_positions: int | None = None,
) -> Step:
    """A causal LM: inference prefill, inference decode (static or dynamic KV cache), or a training step.

    prefill: one forward over batch x seq prompt tokens with the KV cache on and
             logits for the last position only, as `generate()` runs its first step.
    decode:  one new token per sequence against a cache already holding `seq`
             tokens; greedy argmax feeds the next step, as in `generate()`.
    train:   next-token cross-entropy over batch x seq tokens, AMP, AdamW.
    """
    import torch
    from transformers import StaticCache

    gen = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, vocab, (cfg.batch, cfg.seq), generator=gen).to(device)
    ck = cache_kwarg(model)

    if cfg.mode == "train":
        model.train()
        call = compiled(parallelize(model, cfg, device, blocks), cfg, blocks)
        opt = make_optimizer(model, device)

        def loss_fn():
            return call(input_ids=ids, labels=ids, use_cache=False).loss

        fn = train_step(model, loss_fn, opt, device_type=device.type, amp_dtype=amp_dtype(cfg))
        return Step(
            fn,
            model,
            blocks=blocks,
            info=info,
            train=True,
            forward=train_forward(loss_fn, device_type=device.type, amp_dtype=amp_dtype(cfg)),
        )

    model.eval()
    call = compiled(model, cfg, blocks)
    if cfg.phase == "prefill":
        if cfg.kv_cache == "static":
            with torch.inference_mode():
                cache = StaticCache(config=model.config, max_cache_len=cfg.seq)

            def forward():
                rewind_cache(cache, 0, cfg.seq)
                return call(input_ids=ids, use_cache=True, logits_to_keep=1, **{ck: cache}).logits
        else:

            def forward():  # the model builds HF's DynamicCache itself, as a plain forward does
                return call(input_ids=ids, use_cache=True, logits_to_keep=1).logits

        return Step(infer_step(forward), model, blocks=blocks, info=info, forward=infer_forward(forward))

    return _decode_step(cfg, model, call, ids, ck, blocks, info, max_positions)


def _decode_step(
    cfg: RunConfig,
    model: Any,
    call: Any,
    ids: Any,
    ck: str,
    blocks: list[tuple[str, Any]],
    info: dict[str, Any],
    max_positions: int | None,
) -> Step:
    """decode: the cache filled with the prompt once at build time (not part of the step), then one token per
    sequence per step (on static buffers under --graphs)."""
    import torch
    from transformers import DynamicCache, StaticCache

    cap = cfg.seq + DECODE_HEADROOM_TOKENS
    if max_positions is not None:
        cap = min(cap, max_positions)
    with torch.inference_mode():
        if cfg.kv_cache == "static":
            cache = StaticCache(config=model.config, max_cache_len=cap)
        else:
            cache = DynamicCache(config=model.config)
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{ck: cache})
        first = out.logits[:, -1].argmax(-1, keepdim=True)
        state = {"next": first, "used": cfg.seq}
        del out

    if cfg.graphs:
        forward, first_static = _static_decode(call, cache, ck, first, cfg.seq)
        info = dict(
            info,
            decode_cache_capacity=cap,
            decode_position="fixed: every step decodes at the same "
            "position into static input buffers, as a replayed CUDA graph does",
        )
        return Step(
            infer_step(forward),
            model,
            blocks=blocks,
            info=info,
            forward=infer_forward(first_static),
            close=lambda: state.clear(),
        )

    def forward():
        if state["used"] >= cap:
            rewind_cache(cache, cfg.seq, state["used"] - cfg.seq)
            state["used"] = cfg.seq
        out = call(input_ids=state["next"], use_cache=True, logits_to_keep=1, **{ck: cache})
        with phase_range("headroom/sample"):
            state["next"] = out.logits[:, -1].argmax(-1, keepdim=True)
        state["used"] += 1

    def first_token():
        # The first decode step after the prompt, whatever steps ran before: rewind, then decode `first`.
        if state["used"] > cfg.seq:
            rewind_cache(cache, cfg.seq, state["used"] - cfg.seq)
        state["used"], state["next"] = cfg.seq, first
        logits = call(input_ids=first, use_cache=True, logits_to_keep=1, **{ck: cache}).logits
        state["used"], state["next"] = cfg.seq + 1, logits[:, -1].argmax(-1, keepdim=True)
        return logits

    info = dict(info, decode_cache_capacity=cap)
    return Step(
        infer_step(forward),
        model,
        blocks=blocks,
        info=info,
        forward=infer_forward(first_token),
        close=lambda: state.clear(),
    )


def _fixed_write_position(cache: Any, position: int) -> Callable[[], Any] | None:
    """Where a static cache's layers count their own write position on the device (`cumulative_length`,
    advanced in place by every update, replays of a captured graph included): one tensor holding all of
    them, and a reset of it to `position` that a step runs first (one fill kernel, as a serving engine
    copies its step's positions in). None where the cache writes where `cache_position` says."""
    import torch

    layers = getattr(cache, "layers", [])
    counters = [getattr(layer, "cumulative_length", None) for layer in layers]
    if not layers or not all(isinstance(c, torch.Tensor) for c in counters):
        return None
    with torch.inference_mode():
        shared = torch.full((len(layers),), position, dtype=counters[0].dtype, device=counters[0].device)
    for i, layer in enumerate(layers):
        layer.cumulative_length = shared[i]  # a view: the layer's in-place advance lands in `shared`
    return lambda: shared.fill_(position)


def _static_decode(
    call: Any, cache: Any, ck: str, first: Any, position: int
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """A decode step on static buffers, as serving engines capture it: the input token and the cache
    position live in fixed tensors (no host synchronisation to find the position), and greedy argmax writes
    the next token into the input buffer. Every call decodes at the same position: the GPU work of a decode
    step against a cache of that length, replayable from a CUDA graph. Returns the step and the first
    token's decode (the prompt's next token put back in the input buffer first, so that every call of it
    computes the same logits: validate's check compares base and variant on it)."""
    import torch

    ids = first.clone()
    pos = torch.tensor([position], device=first.device)
    rewind = _fixed_write_position(cache, position)

    def forward():
        if rewind is not None:
            rewind()
        out = call(input_ids=ids, use_cache=True, logits_to_keep=1, cache_position=pos, **{ck: cache})
        with phase_range("headroom/sample"):
            ids.copy_(out.logits[:, -1].argmax(-1, keepdim=True))
        return out.logits

    def first_token():
        ids.copy_(first)
        return forward()

    return forward, first_token


def encoder_step(
    cfg: RunConfig,
    device: Any,
    model: Any,
    blocks: list[tuple[str, Any]],
    inputs: dict[str, Any],
    loss_fn: Callable[[Any, dict], Any],
    info: dict[str, Any],
    optimizer: Callable[[Any], Any] | None = None,
) -> Step:
    """Inference forward, or a training step with `loss_fn(call, inputs)` (data-parallel with --nproc)."""
    if cfg.mode == "train":
        model.train()
        call = compiled(parallelize(model, cfg, device, blocks), cfg, blocks)
        opt = optimizer(model) if optimizer else make_optimizer(model, device)
        fn = train_step(model, lambda: loss_fn(call, inputs), opt, device_type=device.type, amp_dtype=amp_dtype(cfg))
        return Step(
            fn,
            model,
            blocks=blocks,
            info=info,
            train=True,
            forward=train_forward(lambda: loss_fn(call, inputs), device_type=device.type, amp_dtype=amp_dtype(cfg)),
        )
    model.eval()
    call = compiled(model, cfg, blocks)
    return Step(
        infer_step(lambda: call(**inputs)),
        model,
        blocks=blocks,
        info=info,
        forward=infer_forward(lambda: call(**inputs)),
    )
