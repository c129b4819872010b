"""The stages of a profiled run that call the step: the warm-up (and, with --graphs, the capture), the timed
steps without the profiler, and the profiled steps under torch.profiler's schedule (headroom.profile.run)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headroom.profile.graphs import GRAPH_TREE_CALLS, capture_raw, recorded_capture, recorded_steps
from headroom.profile.modules import record_module_ranges
from headroom.profile.progress import Progress, _stage
from headroom.profile.timer import _sync, _Timer
from headroom.profile.workload import GRAPH_TREE_MODES, RunConfig, Step
from headroom.stepstats import StepStats

# The name module paths start with (`model.model.layers.3.mlp` for a LlamaForCausalLM).
MODULE_ROOT = "model"
# torch.profiler's schedule before the recorded steps.
PROFILER_WAIT, PROFILER_WARMUP = 1, 1


def experimental_config(dev: Any) -> Any:
    """Kineto's cuda_sync records (stream waits on events), for the replay's cross-stream model, where torch
    supports them (torch >= 2.4 on CUDA); None elsewhere."""
    if dev.type != "cuda":
        return None
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except (ImportError, TypeError):  # an older torch: no such option
        return None


@dataclass
class Recording:
    """What the profiler records (the profiled steps' and a capture trace's)."""

    activities: list[Any]
    record_shapes: bool
    experimental: Any


@dataclass
class Warmed:
    call: Callable[[], Any]  # what the timed and profiled steps run: the step, or its graph's replay
    warm_s: float
    capture_s: float | None  # a graph's capture (--graphs), 0.0 for Inductor's graph trees, else None
    module_hooks: list[Any]


def warm_up(
    step: Step,
    cfg: RunConfig,
    dev: Any,
    warmup: int,
    raw_trace: Path,
    progress: Progress,
    together: Callable[[], None],
    rec: Recording,
) -> Warmed:
    """The warm-up steps; under torch.compile's graph-tree modes the calls after the first (where Inductor
    records its graphs) are profiled into the capture trace; with --graphs the step is then captured, the
    capture profiled with the module ranges on (replays run no Python: the hooks cost them nothing)."""
    graph_trees = dev.type == "cuda" and cfg.compile_mode in GRAPH_TREE_MODES
    with _stage(progress, "warm-up", f"{warmup} steps"):
        t0 = time.perf_counter()
        for _ in range(1 if graph_trees else warmup):
            step()
        if graph_trees:
            recorded_steps(
                step,
                max(warmup - 1, GRAPH_TREE_CALLS),
                dev,
                capture_raw(raw_trace),
                activities=rec.activities,
                record_shapes=rec.record_shapes,
                experimental=rec.experimental,
            )
        _sync(dev)
        warm_s = time.perf_counter() - t0
    if not cfg.graphs:
        return Warmed(step, warm_s, 0.0 if graph_trees else None, [])
    hooks: list[Any] = []
    if cfg.module_ranges and step.modules is not None:
        hooks = record_module_ranges(step.modules, root=MODULE_ROOT)
        step.add_hooks(hooks)
    together()
    with _stage(progress, "capture", "one eager step and the CUDA graph's capture, profiled"):
        captured = recorded_capture(
            step,
            dev,
            capture_raw(raw_trace),
            activities=rec.activities,
            record_shapes=rec.record_shapes,
            experimental=rec.experimental,
        )
    return Warmed(captured.replay, warm_s, captured.capture_s, hooks)


def time_steps(call: Callable[[], Any], dev: Any, n: int, progress: Progress) -> StepStats:
    """`n` steps without the profiler, each timed."""
    with _stage(progress, "timing", f"{n} steps without the profiler"):
        timer = _Timer(dev)
        for _ in range(n):
            with timer.step():
                call()
        return timer.results()


def profile_steps(
    call: Callable[[], Any], dev: Any, steps: int, raw_trace: Path, progress: Progress, rec: Recording
) -> StepStats:
    """`steps` steps under torch.profiler (after its wait and warm-up steps), each timed; the trace exported to
    `raw_trace`. The profiled steps' times."""
    from torch.profiler import profile, schedule

    exported: list[bool] = []

    def on_trace_ready(prof: Any) -> None:
        prof.export_chrome_trace(str(raw_trace))
        exported.append(True)

    with _stage(progress, "profiling", f"{steps} steps (after {PROFILER_WAIT} wait + {PROFILER_WARMUP} warm-up)"):
        ptimer = _Timer(dev)
        with profile(
            activities=rec.activities,
            on_trace_ready=on_trace_ready,
            record_shapes=rec.record_shapes,
            schedule=schedule(wait=PROFILER_WAIT, warmup=PROFILER_WARMUP, active=steps, repeat=1),
            experimental_config=rec.experimental,
        ) as prof:
            for _ in range(PROFILER_WAIT + PROFILER_WARMUP + steps):
                with ptimer.step():
                    call()
                prof.step()
        profiled = ptimer.results(slice(PROFILER_WAIT + PROFILER_WARMUP, None))
    if not exported:
        raise RuntimeError("torch.profiler exported no trace (on_trace_ready never ran)")
    return profiled
