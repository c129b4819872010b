"""Helpers workload builders share: meta-device construction, materialisation, step functions."""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator, Sequence

from headroom.profile.nvtx import phase_range


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

    nn.Module.register_parameter = register
    try:
        yield
    finally:
        nn.Module.register_parameter = original


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


def materialize(model: Any, device: Any, dtype: Any = None, std: float = 0.02,
                init: Callable[[str, str, Any, Any], None] | None = None) -> Any:
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
                new = nn.Parameter(torch.empty(p.shape, dtype=want, device=device),
                                   requires_grad=p.requires_grad)
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


def train_step(model: Any, loss_fn: Callable[[], Any], optimizer: Any, *, device_type: str,
               amp_dtype: Any = None) -> Callable[[], None]:
    """forward (under autocast when `amp_dtype`) -> backward -> optimizer.step, each a named range."""
    import torch

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with phase_range("headroom/forward"):
            if amp_dtype is not None:
                with torch.autocast(device_type=device_type, dtype=amp_dtype):
                    loss = loss_fn()
            else:
                loss = loss_fn()
        with phase_range("headroom/backward"):
            loss.backward()
        with phase_range("headroom/optimizer"):
            optimizer.step()

    return step


def infer_step(forward: Callable[[], Any]) -> Callable[[], None]:
    import torch

    def step() -> None:
        with torch.inference_mode(), phase_range("headroom/forward"):
            forward()

    return step


def compile_model(model: Any, blocks: Sequence[tuple[str, Any]], per_block: bool) -> Any:
    """`torch.compile`: the whole model, or each block's forward (keeps block ranges outside
    the compiled regions, which `--layers` needs). Returns what to call."""
    import torch

    if per_block:
        for _, block in blocks:
            block.forward = torch.compile(block.forward)
        return model
    return torch.compile(model)

