"""Profile an already-built step into a headroom trace (module ranges on), as `headroom profile` does.

`extract` measures the extracted module's share of GPU time in a short profile of the
step it built; `validate` profiles the base and the substituted model with the same
settings. Both use `torch.profiler` with `schedule(wait=1, warmup=1, active=N)`,
`record_shapes=True`, and write the trace with the run manifest under the top-level
"headroom" key, gzip'd to a temporary name and renamed (never a partial file).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headroom.jsonio import plain
from headroom.profile.manifest import MANIFEST_SCHEMA, _inject_and_compress
from headroom.profile.modules import record_module_ranges
from headroom.profile.run import MODULE_ROOT
from headroom.profile.timer import _Timer
from headroom.profile.workload import Step
from headroom.stepstats import StepStats


def module_ranges(step: Step) -> list[Any]:
    """`headroom profile`'s module ranges on the step's ranged module (root "model"); hook handles."""
    return record_module_ranges(step.modules, root=MODULE_ROOT)


def remove(handles: list[Any]) -> None:
    for h in handles:
        h.remove()
    handles.clear()


def record_trace(
    step: Step | Callable[[], Any],
    device: Any,
    dest: Path,
    manifest: dict[str, Any],
    *,
    steps: int = 3,
    wait: int = 1,
    warmup: int = 1,
    record_shapes: bool = True,
) -> StepStats:
    """Profile `steps` steps (after `wait` + `warmup`) into `dest` (.json.gz); the profiled step times."""
    from torch.profiler import ProfilerActivity, profile, schedule

    dest = Path(dest)
    raw = dest.with_name(f".{dest.name}.{os.getpid()}.raw.json")
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    exported: list[bool] = []

    def ready(prof: Any) -> None:
        prof.export_chrome_trace(str(raw))
        exported.append(True)

    try:
        timer = _Timer(device)
        with profile(
            activities=activities,
            schedule=schedule(wait=wait, warmup=warmup, active=steps, repeat=1),
            on_trace_ready=ready,
            record_shapes=record_shapes,
        ) as prof:
            for _ in range(wait + warmup + steps):
                with timer.step():
                    step()
                prof.step()
        if not exported:
            raise RuntimeError("torch.profiler exported no trace (on_trace_ready never ran)")
        profiled = timer.results(slice(wait + warmup, None))
        full = {
            "schema": MANIFEST_SCHEMA,
            **manifest,
            "profiler": {
                "schedule": {"wait": wait, "warmup": warmup, "active": steps},
                "record_shapes": record_shapes,
                "with_stack": False,
                "activities": [a.name for a in activities],
            },
            "module_ranges": True,
        }
        timing = dict(full.get("timing") or {})
        timing["profiled"] = plain(profiled)
        if isinstance(timing.get("step_ms"), (int, float)) and timing["step_ms"] > 0:
            timing["overhead"] = profiled.median_ms / timing["step_ms"] - 1.0
        full["timing"] = timing
        _inject_and_compress(raw, full, dest)
    finally:
        if raw.exists():
            raw.unlink()
    return profiled
