"""CUDA out-of-memory: recognised, and turned into one line that names a fix."""

from __future__ import annotations

import re
from typing import Any

from headroom.errors import UserError
from headroom.profile.workload import RunConfig, WorkloadSpec


def _is_oom(e: BaseException) -> bool:
    import torch

    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    if oom_types and isinstance(e, oom_types):
        return True
    msg = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in msg.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in msg)


def _oom_error(e: BaseException, spec: WorkloadSpec, cfg: RunConfig, device: Any) -> UserError:
    import torch

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
    return UserError(f"{spec.name}: CUDA out of memory at batch {cfg.batch}{seq} "
                     f"(needed more than {need:.1f} GiB, the GPU has {cap:.1f} GiB); try {hint}")

