"""`headroom profile`: run a workload under torch.profiler and classify where the time went.

    build -> warm-up -> timed steps (no profiler) -> profiled steps (schedule) -> export -> classify

* Timed steps run without the profiler: CUDA events around each step on a GPU
  (no host sync between steps, so steps pipeline as in real use), a wall clock
  on the CPU. Their median is the step time; the profiled steps' median over it
  is the profiler's overhead.
* Profiled steps use `schedule(wait=1, warmup=1, active=N)` with `prof.step()`
  markers, `record_shapes`, and export inside `on_trace_ready` to a temporary
  file. The manifest (how the numbers were made) is put into the trace under a
  top-level `"headroom"` key; the result is gzip'd to a temporary file and
  renamed into place, so an interrupted run never leaves a partial trace.
* `--layers N` builds N of the L identical blocks; each block's forward (and
  backward) is a `headroom/block ...` range, so kernel time splits into
  per-block and once-per-step work, and per-block work is scaled by L/N.
* On a machine without CUDA the workload's CPU policy scales the run down
  (fewer layers + extrapolation, shorter sequence, smaller batch, fp32) and the
  trace is classified by CPU operator.
"""

from __future__ import annotations

import gc
import os
import shlex
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from headroom.devices import resolve_device
from headroom.errors import UserError
from headroom.profile.environment import environment
from headroom.profile.manifest import MANIFEST_SCHEMA, _inject_and_compress, update_manifest
from headroom.profile.nvtx import instrument_blocks
from headroom.profile.oom import _is_oom, _oom_error
from headroom.profile.progress import Progress, _stage
from headroom.profile.registry import get_workload, load_workload_file
from headroom.profile.timer import _sync, _Timer
from headroom.stepstats import StepStats
from headroom.profile.workload import Options, RunConfig, Step, WorkloadSpec
from headroom.trace.analysis import Analysis, analyze
from headroom.trace.layers import LayerExtrapolation, extrapolate_layers

# Steps per stage: (warm-up, timed, profiled) on a GPU and on a CPU.
GPU_STEPS = (3, 10, 3)
CPU_STEPS = (1, 3, 1)
# torch.profiler's schedule before the recorded steps.
PROFILER_WAIT, PROFILER_WARMUP = 1, 1


@dataclass
class ProfileResult:
    workload: str
    config: RunConfig
    trace_path: Path
    manifest_path: Path
    manifest: dict[str, Any]
    timed: StepStats
    profiled: StepStats
    analysis: Analysis
    layers: LayerExtrapolation | None = None

    @property
    def overhead(self) -> float:
        """Profiled over unprofiled median step time, minus one."""
        if not self.timed.times_ms or self.timed.median_ms <= 0:
            return float("nan")
        return self.profiled.median_ms / self.timed.median_ms - 1.0

    @property
    def step_ms(self) -> float:
        return self.timed.median_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "trace": str(self.trace_path),
            "manifest": self.manifest,
            "timing": {"timed": self.timed.to_dict(), "profiled": self.profiled.to_dict(),
                       "overhead": self.overhead},
            "layers": self.layers.to_dict() if self.layers else None,
            "analysis": self.analysis.to_dict(),
        }


def _free(device: Any) -> None:
    gc.collect()
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


@dataclass
class _Measured:
    """What one profiled run measured, before the trace is written."""

    timed: StepStats
    profiled: StepStats
    build_s: float
    warmup_s: float
    peak_gb: float | None
    params: int | None
    info: dict[str, Any]
    block_ranges: bool
    activities: list[str]
    cuda_sync_events: bool


def _experimental_config(dev: Any) -> Any:
    """Kineto's cuda_sync records (stream waits on events), for the replay's cross-stream model, where torch
    supports them (torch >= 2.4 on CUDA); None elsewhere."""
    if dev.type != "cuda":
        return None
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except (ImportError, TypeError):   # an older torch: no such option
        return None


def _measure(spec: WorkloadSpec, cfg: RunConfig, dev: Any, counts: tuple[int, int, int], raw_trace: Path,
             progress: Progress, record_shapes: bool) -> _Measured:
    """build -> warm-up -> timed steps (no profiler) -> profiled steps, exported to `raw_trace`."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    warmup, timed_steps, steps = counts
    step: Step | None = None
    try:
        with _stage(progress, "build", f"{spec.name} ({cfg.variant}, batch {cfg.batch}"
                                       f"{', seq ' + str(cfg.seq) if cfg.seq else ''}, {cfg.dtype})"):
            t0 = time.perf_counter()
            step = spec.build(cfg, dev)
            use_ranges = bool(step.blocks) and not (cfg.compile and not cfg.extrapolated)
            if use_ranges:
                step.add_hooks(instrument_blocks(step.blocks, train=cfg.mode == "train"))
            _sync(dev)
            build_s = time.perf_counter() - t0

        with _stage(progress, "warm-up", f"{warmup} steps"):
            t0 = time.perf_counter()
            for _ in range(warmup):
                step()
            _sync(dev)
            warm_s = time.perf_counter() - t0

        with _stage(progress, "timing", f"{timed_steps} steps without the profiler"):
            timer = _Timer(dev)
            for _ in range(timed_steps):
                with timer.step():
                    step()
            timed = timer.results()

        exported: list[bool] = []

        def on_trace_ready(prof: Any) -> None:
            prof.export_chrome_trace(str(raw_trace))
            exported.append(True)

        activities = [ProfilerActivity.CPU]
        if dev.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        experimental = _experimental_config(dev)
        with _stage(progress, "profiling", f"{steps} steps (after {PROFILER_WAIT} wait + {PROFILER_WARMUP} warm-up)"):
            ptimer = _Timer(dev)
            with profile(activities=activities, on_trace_ready=on_trace_ready, record_shapes=record_shapes,
                         schedule=schedule(wait=PROFILER_WAIT, warmup=PROFILER_WARMUP, active=steps, repeat=1),
                         experimental_config=experimental) as prof:
                for _ in range(PROFILER_WAIT + PROFILER_WARMUP + steps):
                    with ptimer.step():
                        step()
                    prof.step()
            profiled = ptimer.results(slice(PROFILER_WAIT + PROFILER_WARMUP, None))
        if not exported:
            raise RuntimeError("torch.profiler exported no trace (on_trace_ready never ran)")
        peak_gb = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None
    except BaseException as e:
        if dev.type == "cuda" and not isinstance(e, KeyboardInterrupt) and _is_oom(e):
            if step is not None:
                step.close()
            step = None
            _free(dev)
            raise _oom_error(e, spec, cfg, dev) from None
        raise
    finally:
        if step is not None:
            step.close()
    measured = _Measured(timed=timed, profiled=profiled, build_s=build_s, warmup_s=warm_s, peak_gb=peak_gb,
                         params=step.params, info=dict(step.info), block_ranges=use_ranges,
                         activities=[a.name for a in activities], cuda_sync_events=experimental is not None)
    step = None
    _free(dev)
    return measured


def _run_manifest(spec: WorkloadSpec, cfg: RunConfig, dev: Any, m: _Measured, counts: tuple[int, int, int],
                  record_shapes: bool, command: str | None, started: datetime, name: str) -> dict[str, Any]:
    """How the numbers were made: the configuration, the environment, the timing (docs/workloads.md)."""
    t, p = m.timed, m.profiled
    overhead = p.median_ms / t.median_ms - 1.0 if t.n and t.median_ms > 0 else None
    return {
        "schema": MANIFEST_SCHEMA,
        "tool": "headroom profile",
        **cfg.to_dict(),
        "domain": spec.domain,
        "model": spec.model,
        "params": m.params,
        # The whole model's count when only some blocks were built (the scaling chart's x).
        **({"params_full": spec.param_count_meta(cfg.flavour)} if cfg.extrapolated else {}),
        "info": m.info,
        "block_ranges": m.block_ranges,
        "device_type": dev.type,
        **environment(dev),
        "profiler": {"schedule": {"wait": PROFILER_WAIT, "warmup": PROFILER_WARMUP, "active": counts[2]},
                     "record_shapes": record_shapes, "with_stack": False, "activities": m.activities,
                     "cuda_sync_events": m.cuda_sync_events},
        "steps": {"warmup": counts[0], "timed": counts[1], "profiled": counts[2]},
        "timing": {"step_ms": t.median_ms, "timed": t.to_dict(), "profiled": p.to_dict(),
                   "overhead": overhead, "build_s": round(m.build_s, 2), "warmup_s": round(m.warmup_s, 2)},
        "peak_memory_gb": round(m.peak_gb, 2) if m.peak_gb is not None else None,
        "command": command or " ".join(shlex.quote(a) for a in sys.argv),
        "date": started.isoformat(timespec="seconds"),
        "trace": name,
    }


def profile_workload(
    workload: str | WorkloadSpec,
    options: Options | None = None,
    *,
    device: str | None = None,
    out: str | os.PathLike = "out",
    steps: int | None = None,
    warmup: int | None = None,
    timed_steps: int | None = None,
    workload_file: str | os.PathLike | None = None,
    progress: Progress | None = None,
    command: str | None = None,
    record_shapes: bool = True,
    trace_name: str | None = None,
) -> ProfileResult:
    """Run `workload` under torch.profiler; return timing, the trace path and its `Analysis`.

    `steps`/`warmup`/`timed_steps`: profiled, warm-up and unprofiled timed steps (None: GPU_STEPS or CPU_STEPS).
    """
    import torch

    progress = progress or Progress()
    options = options or Options()
    if workload_file is not None:
        load_workload_file(workload_file)
    spec = workload if isinstance(workload, WorkloadSpec) else get_workload(workload)
    dev = resolve_device(device)
    cfg = spec.resolve(options, dev.type)
    d_warm, d_timed, d_prof = GPU_STEPS if dev.type == "cuda" else CPU_STEPS
    counts = (d_warm if warmup is None else warmup, d_timed if timed_steps is None else timed_steps,
              d_prof if steps is None else steps)
    if counts[2] < 1 or counts[0] < 0 or counts[1] < 0:
        raise UserError("--steps must be at least 1; --warmup and --timed-steps at least 0")
    if dev.type == "cpu":
        progress.note("no CUDA device: running on the CPU; the trace is classified by CPU operator")
    for note in cfg.notes:
        progress.note(f"scaled for the CPU: {note}")
    if cfg.extrapolated:
        progress.note(f"profiling {cfg.layers} of {cfg.total_layers} blocks; per-block time is scaled "
                      f"x{cfg.total_layers / cfg.layers:g} (embeddings and heads counted once)")

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = trace_name or f"{cfg.tag}.json.gz"
    trace_path = out_dir / name
    raw_tmp = out_dir / f".{name}.{os.getpid()}.raw.json"

    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
        torch.backends.cudnn.allow_tf32 = cfg.tf32
        torch.cuda.reset_peak_memory_stats(dev)
    torch.manual_seed(0)

    started = datetime.now(timezone.utc)
    try:
        measured = _measure(spec, cfg, dev, counts, raw_tmp, progress, record_shapes)
        manifest = _run_manifest(spec, cfg, dev, measured, counts, record_shapes, command, started, name)
        with _stage(progress, "export", str(trace_path)):
            _inject_and_compress(raw_tmp, manifest, trace_path)
    finally:
        if raw_tmp.exists():
            raw_tmp.unlink()

    timed = measured.timed
    with _stage(progress, "classify"):
        analysis = analyze(trace_path)
        layers = None
        if measured.block_ranges and cfg.layers is not None and cfg.total_layers is not None:
            layers = extrapolate_layers(analysis, cfg.layers, cfg.total_layers,
                                        timed_step_ms=timed.median_ms if timed.n else None)
    entry = dict(manifest)
    entry["results"] = {
        "mode": analysis.mode, "step_us_profiled": analysis.step_us,
        "idle_fraction": analysis.idle_fraction, "addressable_fraction": analysis.addressable_fraction,
        "categories": {r.name: float(r.fraction) for r in analysis.categories.itertuples(index=False)},
        "layers": layers.to_dict() if layers else None,
    }
    manifest_path = update_manifest(out_dir, name, entry)
    return ProfileResult(workload=spec.name, config=cfg, trace_path=trace_path, manifest_path=manifest_path,
                         manifest=manifest, timed=timed, profiled=measured.profiled, analysis=analysis,
                         layers=layers)
