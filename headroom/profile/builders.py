"""Helpers workload builders share: meta-device construction, materialisation, step functions."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from headroom.profile.nvtx import phase_range

if TYPE_CHECKING:
    from headroom.profile.workload import RunConfig


@contextlib.contextmanager
def meta_parameters() -> Iterator[None]:
    """Construct modules with parameters on the meta device and buffers on the CPU.

    Parameters (the gigabytes) cost nothing; buffers (rotary frequencies,
    position ids, batch-norm statistics: small) keep their real values, so
    `materialize` only has to initialise parameters.
    """
    import torch.nn as nn

    original = nn.Module.register_parameter

    def register(self, name, param):
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(self, name, param)

    setattr(nn.Module, "register_parameter", register)
    try:
        yield
    finally:
        setattr(nn.Module, "register_parameter", original)


def init_parameter(module_name: str, param_name: str, module: Any, p: Any, std: float = 0.02) -> None:
    """Random initialisation by module type (what the libraries do, without their slow paths)."""
    import torch
    import torch.nn as nn

    with torch.no_grad():
        cls = type(module).__name__
        if param_name == "bias" or param_name.endswith("_bias"):
            p.zero_()
        elif isinstance(module, (nn.LayerNorm, nn.GroupNorm)) or "Norm" in cls:
            p.fill_(1.0)
        elif isinstance(module, nn.Conv2d) or p.dim() == 4:
            fan_out = p.shape[0] * math.prod(p.shape[2:])
            p.normal_(0.0, math.sqrt(2.0 / fan_out))
        else:
            p.normal_(0.0, std)


def materialize(
    model: Any,
    device: Any,
    dtype: Any = None,
    std: float = 0.02,
    init: Callable[[str, str, Any, Any], None] | None = None,
) -> Any:
    """Give every meta parameter real storage on `device` and random values; move buffers.

    Parameters shared between modules (tied embeddings) stay shared. Floating
    buffers keep their dtype (rotary frequencies stay fp32, as in the libraries).
    """
    import torch
    import torch.nn as nn

    init = init or (lambda mn, pn, m, p: init_parameter(mn, pn, m, p, std))
    done: dict[int, nn.Parameter] = {}
    for mname, module in model.named_modules():
        for pname, p in list(module._parameters.items()):
            if p is None:
                continue
            key = id(p)
            if key not in done:
                want = dtype if (dtype is not None and p.is_floating_point()) else p.dtype
                new = nn.Parameter(torch.empty(p.shape, dtype=want, device=device), requires_grad=p.requires_grad)
                init(mname, pname, module, new.data)
                done[key] = new
            module._parameters[pname] = done[key]
        for bname, b in list(module._buffers.items()):
            if b is None:
                continue
            if b.device.type == "meta":
                raise RuntimeError(f"buffer {mname}.{bname} is on the meta device; build under meta_parameters()")
            module._buffers[bname] = b.to(device)
    return model


def train_forward(loss_fn: Callable[[], Any], *, device_type: str, amp_dtype: Any = None) -> Callable[[], Any]:
    """The forward of a training step: `loss_fn()` under autocast when `amp_dtype`; returns the loss."""
    import torch

    def forward() -> Any:
        if amp_dtype is not None:
            with torch.autocast(device_type=device_type, dtype=amp_dtype):
                return loss_fn()
        return loss_fn()

    return forward


def train_step(
    model: Any, loss_fn: Callable[[], Any], optimizer: Any, *, device_type: str, amp_dtype: Any = None
) -> Callable[[], None]:
    """forward (under autocast when `amp_dtype`) -> backward -> optimizer.step, each a named range."""
    forward = train_forward(loss_fn, device_type=device_type, amp_dtype=amp_dtype)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with phase_range("headroom/forward"):
            loss = forward()
        with phase_range("headroom/backward"):
            loss.backward()
        with phase_range("headroom/optimizer"):
            optimizer.step()

    return step


def infer_forward(forward: Callable[[], Any]) -> Callable[[], Any]:
    """`forward()` under inference mode, returning what it returns (the model's output)."""
    import torch

    def run() -> Any:
        with torch.inference_mode():
            return forward()

    return run


def infer_step(forward: Callable[[], Any]) -> Callable[[], None]:
    import torch

    def step() -> None:
        with torch.inference_mode(), phase_range("headroom/forward"):
            forward()

    return step


def compile_model(model: Any, blocks: Sequence[tuple[str, Any]], per_block: bool, mode: str | None = None) -> Any:
    """`torch.compile` in `mode` (None: torch's default): the whole model, or each block's forward (keeps
    block ranges outside the compiled regions, which `--layers` needs). Returns what to call."""
    import torch

    if per_block:
        for _, block in blocks:
            block.forward = torch.compile(block.forward, mode=mode)
        return model
    return torch.compile(model, mode=mode)


def parallelize(model: Any, cfg: RunConfig, device: Any, blocks: Sequence[tuple[str, Any]] = ()) -> Any:
    """What a training step on `cfg.world_size` ranks calls: the model under DDP, or sharded with FSDP2
    (`fully_shard` on each block, then on the root, as torchtitan does; with a low-precision --dtype,
    parameters are gathered in it and gradients reduced in fp32). Build the optimizer after this:
    FSDP2 replaces the parameters by sharded ones. One rank: the model itself."""
    if cfg.world_size <= 1 or cfg.parallel is None:
        return model
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError(f"--parallel {cfg.parallel} needs an initialised process group (headroom profile --nproc)")
    if cfg.parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if cfg.parallel == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        kw: dict[str, Any] = {}
        if cfg.torch_dtype != torch.float32:
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=cfg.torch_dtype, reduce_dtype=torch.float32)
        for _, block in blocks:
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        return model
    raise ValueError(f"parallelize: unknown parallelism {cfg.parallel!r}")
