"""`headroom profile --graphs`: the step captured once as a CUDA graph after warm-up and replayed, as serving
engines (vLLM, SGLang, TensorRT-LLM) run decode.

The capture runs under the profiler with the module ranges on, after one eager step, and is written as its own
trace (`captures/<name>` beside the step trace, named in the manifest's `graphs.capture_trace`). The step trace
holds only replays, so its steps are what production runs; analysing it reads the capture trace to give every
replayed kernel the op, module and phase of the launch that made its node (headroom/trace/graphs.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.profile.manifest import MANIFEST_SCHEMA, _inject_and_compress
from headroom.profile.workload import GRAPH_TREE_MODES, RunConfig

CAPTURE_DIR = "captures"
CAPTURE_RANGE = "headroom/graph-capture"
EAGER_RANGE = "headroom/eager-step"
# Steps run on a side stream before the capture (torch.cuda.graph's documented warm-up: lazy
# initialisations, cuBLAS workspaces and autotuning must not happen inside the capture).
SIDE_STREAM_WARMUP = 3
# Calls profiled into the capture trace under torch.compile(mode="reduce-overhead"), after the first: Inductor's
# graph trees run a call eagerly (warm-up), record the graph on the next, and replay it after.
GRAPH_TREE_CALLS = 3


@dataclass
class Captured:
    """A captured step: `replay()` runs it; `graph` is torch's CUDAGraph (kept alive with its memory pool)."""

    graph: Any
    capture_s: float

    def replay(self) -> None:
        self.graph.replay()


def capture_step(step: Callable[[], Any], device: Any) -> Captured:
    """Warm `step` up on a side stream, then capture one call of it as a CUDA graph. A step that cannot be
    captured (a host synchronisation, a CPU tensor read, a shape that depends on data) is a UserError naming
    CUDA's reason."""
    import torch

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(SIDE_STREAM_WARMUP):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    t0 = time.perf_counter()
    try:
        with torch.cuda.graph(graph):
            step()
    except RuntimeError as e:
        reason = (str(e).strip().splitlines() or ["unknown"])[0]
        raise UserError(
            f"the step cannot be captured as a CUDA graph ({reason}): it synchronises with the host "
            f"or changes shape; run it without --graphs"
        ) from None
    torch.cuda.synchronize(device)
    return Captured(graph, time.perf_counter() - t0)


def recorded_capture(
    step: Callable[[], Any], device: Any, path: Path, *, activities: list[Any], record_shapes: bool, experimental: Any
) -> Captured:
    """One eager step (its kernels name what each op launches, for the check of the replays' order) and the
    capture, under the profiler, exported to `path` (plain JSON)."""
    import torch
    from torch.profiler import profile, record_function

    with profile(activities=activities, record_shapes=record_shapes, experimental_config=experimental) as prof:
        with record_function(EAGER_RANGE):
            step()
        torch.cuda.synchronize(device)
        with record_function(CAPTURE_RANGE):
            captured = capture_step(step, device)
    prof.export_chrome_trace(str(path))
    return captured


def recorded_steps(
    step: Callable[[], Any],
    n: int,
    device: Any,
    path: Path,
    *,
    activities: list[Any],
    record_shapes: bool,
    experimental: Any,
) -> None:
    """`n` calls of `step` under the profiler, exported to `path`: the warm-up calls in which torch.compile's
    reduce-overhead mode records its CUDA graphs (Inductor's graph trees capture on a call after the first)."""
    import torch
    from torch.profiler import profile, record_function

    with profile(activities=activities, record_shapes=record_shapes, experimental_config=experimental) as prof:
        for _ in range(n):
            with record_function(CAPTURE_RANGE):
                step()
        torch.cuda.synchronize(device)
    prof.export_chrome_trace(str(path))


CAPTURED = (
    "after warm-up, one call of the step on static inputs (torch.cuda.graph); the timed and profiled steps replay it"
)
CAPTURED_BY_COMPILE = (
    "torch.compile (reduce-overhead or max-autotune): Inductor's CUDA graph trees, recorded during the "
    "warm-up calls after the first (the capture trace holds them)"
)


def graphs_manifest(cfg: RunConfig, name: str, capture_s: float) -> dict[str, Any]:
    """The manifest's `graphs`: where the capture trace is, how the graph was made, how long its capture took
    (--graphs; Inductor's graph trees record theirs inside the warm-up calls, not timed apart)."""
    if cfg.compile_mode in GRAPH_TREE_MODES:
        return {"capture_trace": f"{CAPTURE_DIR}/{name}", "captured": CAPTURED_BY_COMPILE}
    return {"capture_trace": f"{CAPTURE_DIR}/{name}", "capture_s": round(capture_s, 3), "captured": CAPTURED}


def capture_raw(raw_trace: Path) -> Path:
    """Where --graphs exports the capture's raw trace, beside the step's."""
    return raw_trace.with_name(raw_trace.name.replace(".raw.json", ".capture.raw.json"))


def write_capture(raw_trace: Path, manifest: dict[str, Any], dest: Path) -> None:
    """The capture's trace, gzip'd to `dest` (captures/ beside the step trace), with a manifest naming the trace
    whose graph it captured."""
    dest.parent.mkdir(exist_ok=True)
    raw = capture_raw(raw_trace)
    part = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        _inject_and_compress(
            raw,
            {
                "schema": MANIFEST_SCHEMA,
                "tool": "headroom profile --graphs",
                "capture_of": manifest["trace"],
                "workload": manifest["workload"],
                "variant": manifest["variant"],
                **{k: manifest[k] for k in ("compiled_modules",) if k in manifest},
            },
            part,
        )
        os.replace(part, dest)
    finally:
        for tmp in (raw, part):
            if tmp.exists():
                tmp.unlink()
