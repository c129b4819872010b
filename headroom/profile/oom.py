"""Out of memory, on a GPU or in the CPU's allocator (`--batch 1000000000`): recognised, and turned into
one line that names a fix instead of the allocator's traceback."""

from __future__ import annotations

import re
from typing import Any

from headroom.errors import UserError
from headroom.profile.workload import RunConfig, WorkloadSpec


def _is_oom(e: BaseException) -> bool:
    import torch

    oom_types = tuple(
        t
        for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None))
        if t is not None
    )
    if oom_types and isinstance(e, oom_types):
        return True
    msg = str(e)
    return isinstance(e, RuntimeError) and (
        "out of memory" in msg.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in msg or _is_cpu_oom(e)
    )


# What torch's CPU allocator says, and what a size too big to compute says (a batch of 10^9 tokens).
_CPU_OOM = re.compile(
    r"DefaultCPUAllocator: (can't|not enough memory)|can't allocate memory|"
    r"Storage size calculation overflowed|numel: integer multiplication overflow|"
    r"invalid argument 0: Sizes of tensors|Trying to create tensor with negative dimension"
)


def _is_cpu_oom(e: BaseException) -> bool:
    return isinstance(e, (RuntimeError, MemoryError)) and (isinstance(e, MemoryError) or bool(_CPU_OOM.search(str(e))))


def _cpu_oom_error(e: BaseException, spec: WorkloadSpec, cfg: RunConfig) -> UserError:
    m = re.search(r"allocate (\d+) bytes", str(e))
    asked = f" (asked for {int(m.group(1)) / 2**30:,.1f} GiB)" if m else ""
    hint = "a smaller --batch" + (" or --seq" if cfg.seq else "")
    seq = f" x seq {cfg.seq}" if cfg.seq else ""
    return UserError(f"{spec.name}: out of memory on the CPU at batch {cfg.batch}{seq}{asked}; try {hint}")


def oom_error(e: BaseException, spec: WorkloadSpec, cfg: RunConfig, device: Any) -> UserError:
    import torch

    if getattr(device, "type", "cpu") != "cuda" or (_is_cpu_oom(e) and "CUDA" not in str(e)):
        return _cpu_oom_error(e, spec, cfg)

    gib = 2**30
    asked = 0.0
    m = re.search(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB)", str(e))
    if m:
        asked = float(m.group(1)) * {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 2**20}[m.group(2)]
    try:
        held = torch.cuda.max_memory_allocated(device) / gib
        cap = torch.cuda.get_device_properties(device).total_memory / gib
    except Exception:
        held, cap = 0.0, 0.0
    need = held + asked
    hint = "a smaller --batch"
    if spec.num_layers is not None:
        hint += " or --layers N (profile N blocks, extrapolate)"
    seq = f" x seq {cfg.seq}" if cfg.seq else ""
    return UserError(
        f"{spec.name}: CUDA out of memory at batch {cfg.batch}{seq} "
        f"(needed more than {need:.1f} GiB, the GPU has {cap:.1f} GiB); try {hint}"
    )
