"""``launches_per_call``: kernels one forward launches (GPU), or aten ops it dispatches (CPU)."""

from __future__ import annotations

from typing import Any


def count(model: Any, xs: list, cuda: bool) -> tuple[int | None, str]:
    """GPU: CUDA kernels in one forward (torch.profiler, memcpy/memset excluded); CPU: dispatched aten
    ops that are not views (the CPU stand-in: each is one kernel call). ``None`` when not measurable."""
    import torch

    try:
        if cuda:
            from torch.autograd import DeviceType
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p, torch.no_grad():
                model(*xs)
                torch.cuda.synchronize()
            n = sum(1 for e in p.events() if e.device_type == DeviceType.CUDA
                    and not e.name.startswith(("Memcpy", "Memset", "[memory]")))
            return n, "CUDA kernels in one forward (torch.profiler; memcpy/memset excluded)"
        from torch.utils._python_dispatch import TorchDispatchMode

        class Count(TorchDispatchMode):
            n = 0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if not getattr(func, "is_view", False):
                    Count.n += 1
                return func(*args, **(kwargs or {}))

        with Count(), torch.no_grad():
            model(*xs)
        return Count.n, "aten ops dispatched by one forward, views excluded (CPU: no kernel launches to count)"
    except Exception as e:
        return None, f"not measured: {type(e).__name__}: {e}"[:200]
