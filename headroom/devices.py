"""The one device resolver: `auto`, `cpu`, `cuda` or `cuda:N` -> a torch.device, checked against this machine.

torch is imported only when a device is resolved.
"""

from __future__ import annotations

from typing import Any

from headroom.errors import UserError


def resolve_device(device: str | None) -> Any:
    """A torch.device that exists here; `auto`/None is CUDA when present, else the CPU.

    A CUDA device always carries its index (set_device, NCCL and DMP want one).
    """
    import torch

    if device in (None, "", "auto"):
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        d = torch.device(device)
    except RuntimeError:
        raise UserError(f"unknown --device '{device}'; use auto, cpu or cuda") from None
    if d.type == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available here")
    if d.type not in ("cuda", "cpu"):
        raise UserError(f"--device {device}: only cpu and cuda are supported")
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    if d.type == "cuda" and d.index >= torch.cuda.device_count():
        raise UserError(f"--device {device}: this machine has {torch.cuda.device_count()} GPU(s)")
    return d
