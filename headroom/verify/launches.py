"""What one forward does: kernels launched, their time on the profiler's clock, host synchronisations,
bytes copied to the host (GPU); aten ops dispatched (CPU).

Profiled over ``FORWARDS`` forwards after one untimed forward (a Triton kernel compiles at its first
call), per forward. A host synchronisation is a runtime call that blocks the CPU until the GPU has
caught up: ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``cudaEventSynchronize`` and a
blocking ``cudaMemcpy`` (``tensor.item()`` and ``bool(cuda_tensor)`` are a ``cudaMemcpyAsync`` to
pageable memory followed by ``cudaStreamSynchronize``: one). What the projector needs to see a
change that adds one (docs/projection.md, "Host synchronisations").
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any

FORWARDS = 3
SYNC_CALLS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
)
METHOD_GPU = (
    f"torch.profiler over {FORWARDS} forwards after one untimed: CUDA kernels (memcpy/memset excluded), "
    f"their summed durations, blocking runtime calls ({', '.join(SYNC_CALLS[:3])}, blocking cudaMemcpy), "
    f"device-to-host bytes; per forward"
)


TOP_KERNELS = 3
NAME_CHARS = 160


@dataclass(frozen=True)
class CallProfile:
    launches: int | None
    method: str
    kernel_us: float | None = None
    syncs: float | None = None
    d2h_bytes: float | None = None
    # the kernels (CPU: aten ops) that took most of the time: (name, summed us per forward or None on a CPU,
    # calls per forward), longest first; two processes running different algorithms for one op show here
    top_kernels: tuple[tuple[str, float | None, float], ...] = ()


def top_kernels(events: list[dict], forwards: int, n: int = TOP_KERNELS) -> tuple[tuple[str, float | None, float], ...]:
    """The ``n`` kernels of a trace with the most summed time, per forward."""
    total: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat", "") == "kernel":
            t = total.setdefault(str(e.get("name", ""))[:NAME_CHARS], [0.0, 0.0])
            t[0] += float(e.get("dur", 0.0))
            t[1] += 1
    best = sorted(total.items(), key=lambda kv: (-kv[1][0], kv[0]))[:n]
    return tuple((name, us / forwards, k / forwards) for name, (us, k) in best)


def _profiled(fn: Any) -> list[dict]:
    """The events of a chrome trace of ``fn()`` under torch.profiler (CPU + CUDA activities)."""
    from torch.profiler import ProfilerActivity, profile

    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            fn()
        p.export_chrome_trace(path)
        with open(path) as f:
            return [e for e in json.load(f).get("traceEvents", []) if e.get("ph") == "X"]
    finally:
        os.unlink(path)


def _count(events: list[dict]) -> tuple[int, float, int, float]:
    kernels = syncs = 0
    kernel_us = d2h = 0.0
    for e in events:
        cat, name = e.get("cat", ""), e.get("name", "")
        if cat == "kernel":
            kernels += 1
            kernel_us += float(e.get("dur", 0.0))
        elif cat == "gpu_memcpy" and "DtoH" in name:
            d2h += float((e.get("args") or {}).get("bytes", 0) or 0)
        elif cat == "cuda_runtime" and name in SYNC_CALLS:
            syncs += 1
    return kernels, kernel_us, syncs, d2h


def _gpu(model: Any, xs: list) -> CallProfile:
    import torch

    with torch.no_grad():
        model(*xs)
    torch.cuda.synchronize()

    def forwards() -> None:
        with torch.no_grad():
            for _ in range(FORWARDS):
                model(*xs)
        torch.cuda.synchronize()

    # the same profile around no forward: what the profiler and the closing synchronise add themselves
    _, _, syncs0, _ = _count(_profiled(torch.cuda.synchronize))
    events = _profiled(forwards)
    kernels, kernel_us, syncs, d2h = _count(events)
    return CallProfile(
        kernels // FORWARDS,
        METHOD_GPU,
        kernel_us / FORWARDS,
        max(0, syncs - syncs0) / FORWARDS,
        d2h / FORWARDS,
        top_kernels(events, FORWARDS),
    )


def profile_call(model: Any, xs: list, cuda: bool) -> CallProfile:
    """See the module docstring; ``launches`` None (with the reason in ``method``) when not measurable."""
    try:
        if cuda:
            return _gpu(model, xs)
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        ops: dict[str, int] = {}

        class Count(TorchDispatchMode):
            n = 0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if not getattr(func, "is_view", False):
                    Count.n += 1
                    ops[str(func)] = ops.get(str(func), 0) + 1
                return func(*args, **(kwargs or {}))

        with Count(), torch.no_grad():
            model(*xs)
        top = tuple(
            (name, None, float(k)) for name, k in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_KERNELS]
        )
        return CallProfile(
            Count.n,
            "aten ops dispatched by one forward, views excluded (CPU: no kernel launches to count)",
            top_kernels=top,
        )
    except Exception as e:
        return CallProfile(None, f"not measured: {type(e).__name__}: {e}"[:200])


def count(model: Any, xs: list, cuda: bool) -> tuple[int | None, str]:
    """Kernels (GPU) or aten ops (CPU) of one forward, and how they were counted."""
    p = profile_call(model, xs, cuda)
    return p.launches, p.method
