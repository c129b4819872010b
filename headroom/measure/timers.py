"""One timer registry: how a block of steps is timed, by name (KernelBench's ``get_timing_function`` is the model).

A timer runs ``k`` calls of ``step`` back to back and returns each call's time in milliseconds:

* ``cuda-events``: a CUDA event pair around each call and no host synchronisation inside the block
  (calls pipeline as in real use), one synchronisation at its end. A GPU's default.
* ``wall-clock``: the host's ``perf_counter`` around each call, nothing synchronised. A CPU's default.
* ``host-sync``: the host's clock around each call with the device synchronised before and after it
  (KernelBench's ``host_time``): each call's whole latency, launches and waits included, no overlap.

``get_timer(name)`` returns one; ``default_timer(device)`` names the default for a device. Validate's
blocks measure with these (``headroom.profile.timer`` holds the first two for profile's timed steps).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

BlockTimer = Callable[[Callable[[], Any], int, Any], list[float]]


def _sync(device: Any) -> None:
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        torch.cuda.synchronize(device)


def cuda_events(step: Callable[[], Any], k: int, device: Any) -> list[float]:
    import torch

    events = []
    for _ in range(k):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        step()
        e.record()
        events.append((s, e))
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) for s, e in events]


def wall_clock(step: Callable[[], Any], k: int, device: Any) -> list[float]:
    out = []
    for _ in range(k):
        t0 = time.perf_counter()
        step()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def host_sync(step: Callable[[], Any], k: int, device: Any) -> list[float]:
    out = []
    for _ in range(k):
        _sync(device)
        t0 = time.perf_counter()
        step()
        _sync(device)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


TIMERS: dict[str, BlockTimer] = {"cuda-events": cuda_events, "wall-clock": wall_clock, "host-sync": host_sync}


def default_timer(device: Any) -> str:
    return "cuda-events" if getattr(device, "type", "cpu") == "cuda" else "wall-clock"


def get_timer(name: str, device: Any = None) -> BlockTimer:
    """The timer called ``name`` (ValueError naming the known ones otherwise); ``cuda-events`` needs a GPU."""
    if name not in TIMERS:
        raise ValueError(f"unknown timer {name!r}; known: {', '.join(sorted(TIMERS))}")
    if name == "cuda-events" and device is not None and getattr(device, "type", "cpu") != "cuda":
        raise ValueError("the cuda-events timer needs a CUDA device")
    return TIMERS[name]
