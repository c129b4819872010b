"""The child's memory measurement: peak memory of one forward after a warm-up forward."""

from __future__ import annotations

from typing import Any

import torch


def _proc_status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _tensor_bytes(model: Any) -> int:
    if not isinstance(model, torch.nn.Module):
        return 0
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def _memory(model: Any, xs: list, prims: Any, device: Any, poison: Any) -> tuple[int, str, int | None]:
    """Peak memory of one forward after a warm-up forward (inputs are the harness's, not counted); each
    output poisoned (``_poison``) before it is freed, like every command's; and (GPU) the device memory
    free as the warm-up started.

    The warm-up is the child's first forward: cuDNN picks a convolution's algorithm then, among those
    whose workspace fits the largest block the caching allocator could hand out (the largest cached
    free block; with none cached, the device's free memory). The cache is emptied first, so what is
    left over from building the model never limits that choice, in the reference's child and the
    candidate's alike."""
    free = None
    if prims.cuda:
        prims.sync()
        torch.cuda.empty_cache()
        free = int(torch.cuda.mem_get_info(device)[0])
    with torch.no_grad():
        out = model(*xs)
    poison([out])
    del out
    if prims.cuda:
        prims.sync()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        with torch.no_grad():
            out = model(*xs)
        prims.sync()
        poison([out])
        del out
        return (
            int(torch.cuda.max_memory_allocated(device)),
            "torch.cuda.max_memory_allocated over one forward (parameters, temporaries, outputs)",
            free,
        )
    before = _proc_status_kb("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    with torch.no_grad():
        out = model(*xs)
    hwm = _proc_status_kb("VmHWM") if reset else None
    poison([out])
    del out
    if before is None or hwm is None:
        return _tensor_bytes(model), "parameter bytes only (no /proc peak RSS)", None
    return (
        _tensor_bytes(model) + max(0, (hwm - before) * 1024),
        "parameter bytes plus the VmHWM rise over one forward (after a /proc/self/clear_refs reset)",
        None,
    )
