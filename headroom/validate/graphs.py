"""`headroom validate --graphs`: base and variant each captured as a CUDA graph after warm-up and replayed, as
serving engines run decode. The rounds time the replays; each side's profile is `headroom profile --graphs`'s:
one eager step and the capture with module ranges on (`captures/<side trace>`), then replays. So the a-priori
estimate projects onto a trace of replays, where a kernel launched inside the graph costs no CPU launch. The
output check runs the eager step. GPU only; a step that cannot be captured (a host synchronisation, a
data-dependent shape) is refused with CUDA's reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.profile.graphs import (
    CAPTURE_DIR,
    capture_raw,
    capture_step,
    graphs_manifest,
    recorded_capture,
    write_capture,
)
from headroom.stepstats import StepStats


def graph_sides(
    step: Callable[[], Any], use: Callable[[str], None], device: Any
) -> tuple[Callable[[], None], Callable[[str], None]]:
    """(replay, use): ``replay()`` replays the graph of the side ``use(side)`` chose last; base first."""
    if getattr(device, "type", "cpu") != "cuda":
        raise UserError("--graphs needs a CUDA device (it captures each side as a CUDA graph)")
    graphs = {}
    for side in ("base", "variant"):
        use(side)
        graphs[side] = capture_step(step, device)  # kept alive: its graph and memory pool
    use("base")
    current = ["base"]

    def use_graph(side: str) -> None:
        use(side)
        current[0] = side

    def replay() -> None:
        graphs[current[0]].replay()

    return replay, use_graph


def record_graph_trace(
    step: Callable[[], Any],
    device: Any,
    dest: Path,
    manifest: dict[str, Any],
    cfg: Any,
    record: Callable[..., StepStats],
    *,
    steps: int,
) -> StepStats:
    """One side's trace under --graphs: the eager step and the capture profiled into ``captures/<dest name>``
    (the module ranges the caller installed are on), then ``record(replay, device, dest, manifest, steps=...)``
    profiles replays of that capture. The manifest names the capture trace, as `headroom profile --graphs`'s
    does, so analysing ``dest`` attributes every replayed kernel from it."""
    from torch.profiler import ProfilerActivity

    raw = dest.with_name(f".{dest.name}.{os.getpid()}.raw.json")
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    captured = recorded_capture(
        step, device, capture_raw(raw), activities=activities, record_shapes=True, experimental=None
    )
    full = {**manifest, "graphs": graphs_manifest(cfg, dest.name, captured.capture_s)}
    try:
        stats = record(captured.replay, device, dest, full, steps=steps)
        write_capture(raw, full, dest.parent / CAPTURE_DIR / dest.name)
    finally:
        if capture_raw(raw).exists():
            capture_raw(raw).unlink()
    return stats
