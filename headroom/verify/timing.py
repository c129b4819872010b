"""The timing protocol, the same for the reference and the candidate.

Per iteration (warm-up iterations run the same loop and are discarded):

1. fresh inputs: ``get_inputs()`` under a new seed (the same seed sequence in
   every process, so the reference's outputs can vouch for the candidate's);
2. L2 flush: write a buffer of twice the L2 size (64 MB on a CPU);
3. synchronise the device; record the start event (CPU: read the clock);
4. call the model;
5. record a "current stream" event, then synchronise *the whole device* (every
   stream, so work hidden on a side stream is counted), then record the end
   event and wait for it;
6. outside the timed region, fingerprint the output (``checks.fingerprint``)
   so a stale, cached or lazily-written output in a timed iteration is caught.

The median of N and the spread (quartiles, min, max) are reported. The
device-wide synchronise adds the same few microseconds to both timings, so
speedups of kernels under ~100 us are conservative.

The clocks and synchronisation functions are captured (``Primitives``) before
any candidate code is imported, and called through the captured C-level
objects: a candidate that replaces ``time.perf_counter``,
``torch.cuda.Event.elapsed_time`` or ``torch.cuda.synchronize`` in its process
changes nothing here (and is reported by the integrity check in
``headroom.verify.child``).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

CPU_FLUSH_BYTES = 64 << 20

# Peak DRAM bandwidth (bytes/s) for the roofline-style review flag.
PEAK_BANDWIDTH = {
    "H200": 4.8e12,
    "H100 NVL": 3.9e12,
    "H100": 3.35e12,
    "H800": 3.35e12,
    "GH200": 4.0e12,
    "B200": 8.0e12,
    "B100": 8.0e12,
    "A100": 2.04e12,
    "A800": 2.04e12,
    "L40S": 0.864e12,
    "L4": 0.3e12,
    "A10": 0.6e12,
    "V100": 0.9e12,
}


@dataclass
class Primitives:
    """Timing/synchronisation callables captured before a candidate is imported."""

    perf_counter: Callable[[], float]
    cuda: bool = False
    device_sync: Callable[[], None] | None = None
    event_cls: Any = None
    ev_record: Callable | None = None
    ev_elapsed: Callable | None = None
    ev_sync: Callable | None = None
    stream: Any = None  # the harness's stream (the current stream at start-up)
    events: tuple = ()  # start, current-stream end, end (created before the candidate is imported)


def capture(device: Any) -> Primitives:
    """Capture the clocks; on CUDA also initialise the device and take its current stream."""
    import torch

    prims = Primitives(perf_counter=time.perf_counter)
    if getattr(device, "type", str(device)) == "cuda" or str(device).startswith("cuda"):
        torch.cuda.init()
        base = torch._C._CudaEventBase
        prims.cuda = True
        prims.device_sync = torch._C._cuda_synchronize
        prims.event_cls = torch.cuda.Event
        prims.ev_record = base.record
        prims.ev_elapsed = base.elapsed_time
        prims.ev_sync = base.synchronize
        prims.stream = torch.cuda.current_stream()
        prims.events = tuple(torch.cuda.Event(enable_timing=True) for _ in range(3))
    return prims


def set_tf32(enabled: bool) -> dict:
    """Set both TF32 flags explicitly (cuBLAS and cuDNN); return the resulting precision state."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled
    return precision_state()


def precision_state() -> dict:
    """The float32 precision settings in force (recorded in every result's ``baseline``)."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st = {"allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
              "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
              "float32_matmul_precision": torch.get_float32_matmul_precision()}
        for key, obj in (("matmul_fp32_precision", torch.backends.cuda.matmul),
                         ("cudnn_fp32_precision", getattr(torch.backends.cudnn, "conv", None))):
            v = getattr(obj, "fp32_precision", None) if obj is not None else None
            if v is not None:
                st[key] = str(v)
    return st


def sync(prims: Primitives) -> None:
    if prims.cuda:
        prims.device_sync()


def flush_bytes(device: Any) -> int:
    import torch

    if str(device).startswith("cuda"):
        try:
            l2 = int(torch.cuda.get_device_properties(torch.device(device)).L2_cache_size)
        except Exception:
            l2 = 0
        return max(2 * l2, 128 << 20) if l2 > 0 else 256 << 20
    return CPU_FLUSH_BYTES


def stats(times: list[float]) -> dict:
    """median, quartiles, min, max, mean and count of a list of times (ms)."""
    if not times:
        return {"n": 0, "median": None}
    xs = sorted(times)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
    return {"n": len(xs), "median": statistics.median(xs), "p25": q[0], "p75": q[2],
            "min": xs[0], "max": xs[-1], "mean": statistics.fmean(xs),
            "iqr_rel": (q[2] - q[0]) / statistics.median(xs) if statistics.median(xs) > 0 else None}


def time_phase(run: Callable[[list], Any], make_inputs: Callable[[int], list], warmup: int, iters: int,
               prims: Primitives, flush_buf: Any, on_output: Callable[[int, Any], None] | None = None,
               deadline: float | None = None) -> dict:
    """Run the protocol; returns per-iteration times (ms) and, on CUDA, current-stream times."""
    times: list[float] = []
    naive: list[float] = []
    total = warmup + iters
    for k in range(total):
        inputs = make_inputs(k)
        flush_buf.fill_(float(k % 7))
        sync(prims)
        if prims.cuda:
            start, mid, end = prims.events
            prims.ev_record(start, prims.stream)
            out = run(inputs)
            prims.ev_record(mid, prims.stream)
            prims.device_sync()
            prims.ev_record(end, prims.stream)
            prims.ev_sync(end)
            t = prims.ev_elapsed(start, end)
            t_naive = prims.ev_elapsed(start, mid)
        else:
            t0 = prims.perf_counter()
            out = run(inputs)
            t = (prims.perf_counter() - t0) * 1e3
            t_naive = t
        if k >= warmup:
            times.append(float(t))
            naive.append(float(t_naive))
            if on_output is not None:
                on_output(k - warmup, out)
        del out, inputs
        if deadline is not None and time.monotonic() > deadline:
            break
    return {"times_ms": times, "current_stream_ms": naive if prims.cuda else None}


def peak_bandwidth(device: Any, prims: Primitives | None = None) -> tuple[float, str]:
    """Peak memory bandwidth (bytes/s) for the roofline flag, and where it came from."""
    import torch

    if str(device).startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
        for key in sorted(PEAK_BANDWIDTH, key=len, reverse=True):
            if key in name:
                return PEAK_BANDWIDTH[key], f"datasheet ({key})"
    measured = measure_bandwidth(device, prims)
    return 1.5 * measured, "1.5 x measured copy bandwidth"


def measure_bandwidth(device: Any, prims: Primitives | None = None) -> float:
    """A quick copy-bandwidth measurement (bytes/s: read + write)."""
    import torch

    n = (256 << 20) if str(device).startswith("cuda") else (32 << 20)
    a = torch.empty(n // 4, dtype=torch.float32, device=device).fill_(1.0)
    b = torch.empty_like(a)
    best = math.inf
    for _ in range(5):
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        b.copy_(a)
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * n / best
