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

from headroom.errors import UserError
from headroom.profile.environment import environment
from headroom.profile.manifest import MANIFEST_NAME, MANIFEST_SCHEMA, _inject_and_compress, update_manifest
from headroom.profile.nvtx import instrument_blocks
from headroom.profile.oom import _is_oom, _oom_error
from headroom.profile.progress import Progress, _phase
from headroom.profile.registry import get_workload, load_workload_file
from headroom.profile.timer import StepStats, _sync, _Timer
from headroom.profile.workload import Options, RunConfig, Step, WorkloadSpec
from headroom.trace.layers import LayerExtrapolation, extrapolate_layers

# Steps per phase: (warm-up, timed, profiled) on a GPU and on a CPU.
GPU_STEPS = (3, 10, 3)
CPU_STEPS = (1, 3, 1)


@dataclass
class ProfileResult:
    workload: str
    config: RunConfig
    trace_path: Path
    manifest_path: Path
    manifest: dict[str, Any]
    timed: StepStats
    profiled: StepStats
    analysis: Any                      # headroom.trace.analysis.Analysis
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


def resolve_device(device: str | None) -> Any:
    import torch

    if device in (None, "", "auto"):
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        d = torch.device(device)
    except RuntimeError:
        raise UserError(f"unknown --device '{device}'; use auto, cpu or cuda") from None
    if d.type == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is available here")
    if d.type not in ("cuda", "cpu"):
        raise UserError(f"--device {device}: only cpu and cuda are supported")
    if d.type == "cuda" and d.index is None:   # an explicit index: set_device, NCCL and DMP want one
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def _free(device: Any) -> None:
    gc.collect()
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


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
    rank: Any = None,
) -> ProfileResult:
    """Run `workload` under torch.profiler; return timing, the trace path and its `Analysis`.

    `rank`: this process's place in a `--nproc` run (headroom.profile.launch.RankContext): the
    phases start together on every rank, the manifest says which rank this is, and the parent
    writes manifest.json and classifies the ranks together (`analysis` is None here)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from headroom.trace.analysis import analyze

    progress = progress or Progress()
    options = options or Options()
    if workload_file is not None:
        load_workload_file(workload_file)
    spec = workload if isinstance(workload, WorkloadSpec) else get_workload(workload)
    dev = rank.device if rank is not None else resolve_device(device)
    together = rank.barrier if rank is not None else (lambda: None)
    cfg = spec.resolve(options, dev.type)
    d_warm, d_timed, d_prof = GPU_STEPS if dev.type == "cuda" else CPU_STEPS
    warmup = d_warm if warmup is None else warmup
    timed_steps = d_timed if timed_steps is None else timed_steps
    steps = d_prof if steps is None else steps
    if steps < 1 or warmup < 0 or timed_steps < 0:
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

    step: Step | None = None
    started = datetime.now(timezone.utc)
    try:
        try:
            with _phase(progress, "build", f"{spec.name} ({cfg.variant}, batch {cfg.batch}"
                                           f"{', seq ' + str(cfg.seq) if cfg.seq else ''}, {cfg.dtype})"):
                t0 = time.perf_counter()
                step = spec.build(cfg, dev)
                use_ranges = bool(step.blocks) and not (cfg.compile and not cfg.extrapolated)
                if use_ranges:
                    step.add_hooks(instrument_blocks(step.blocks, train=cfg.mode == "train"))
                _sync(dev)
                build_s = time.perf_counter() - t0

            together()
            with _phase(progress, "warm-up", f"{warmup} steps"):
                t0 = time.perf_counter()
                for _ in range(warmup):
                    step()
                _sync(dev)
                warm_s = time.perf_counter() - t0

            together()
            with _phase(progress, "timing", f"{timed_steps} steps without the profiler"):
                timer = _Timer(dev)
                for _ in range(timed_steps):
                    with timer.step():
                        step()
                timed = timer.results()

            exported: list[bool] = []

            def on_trace_ready(prof: Any) -> None:
                prof.export_chrome_trace(str(raw_tmp))
                exported.append(True)

            activities = [ProfilerActivity.CPU]
            if dev.type == "cuda":
                activities.append(ProfilerActivity.CUDA)
            wait, warm = 1, 1
            together()
            with _phase(progress, "profiling", f"{steps} steps (after {wait} wait + {warm} warm-up)"):
                ptimer = _Timer(dev)
                with profile(activities=activities, schedule=schedule(wait=wait, warmup=warm, active=steps, repeat=1),
                             on_trace_ready=on_trace_ready, record_shapes=record_shapes) as prof:
                    for _ in range(wait + warm + steps):
                        with ptimer.step():
                            step()
                        prof.step()
                profiled = ptimer.results(slice(wait + warm, None))
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
        params = step.params
        info = dict(step.info)
        step = None
        _free(dev)

        overhead = profiled.median_ms / timed.median_ms - 1.0 if timed.n and timed.median_ms > 0 else None
        manifest: dict[str, Any] = {
            "schema": MANIFEST_SCHEMA,
            "tool": "headroom profile",
            **cfg.to_dict(),
            "domain": spec.domain,
            "model": spec.model,
            "params": params,
            "info": info,
            "block_ranges": use_ranges,
            "device_type": dev.type,
            **environment(dev),
            "profiler": {"schedule": {"wait": wait, "warmup": warm, "active": steps},
                         "record_shapes": record_shapes, "with_stack": False,
                         "activities": [a.name for a in activities]},
            "steps": {"warmup": warmup, "timed": timed_steps, "profiled": steps},
            "timing": {"step_ms": timed.median_ms, "timed": timed.to_dict(), "profiled": profiled.to_dict(),
                       "overhead": overhead, "build_s": round(build_s, 2), "warmup_s": round(warm_s, 2)},
            "peak_memory_gb": round(peak_gb, 2) if peak_gb is not None else None,
            "command": command or " ".join(shlex.quote(a) for a in sys.argv),
            "date": started.isoformat(timespec="seconds"),
            "trace": name,
        }
        if rank is not None:
            manifest["distributed"] = rank.to_dict()
        with _phase(progress, "export", str(trace_path)):
            _inject_and_compress(raw_tmp, manifest, trace_path)
    finally:
        if raw_tmp.exists():
            raw_tmp.unlink()

    if rank is not None:
        return ProfileResult(workload=spec.name, config=cfg, trace_path=trace_path,
                             manifest_path=out_dir / MANIFEST_NAME, manifest=manifest, timed=timed,
                             profiled=profiled, analysis=None)
    with _phase(progress, "classify"):
        analysis = analyze(trace_path)
        layers = None
        if use_ranges and cfg.layers is not None and cfg.total_layers is not None:
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
                         manifest=manifest, timed=timed, profiled=profiled, analysis=analysis, layers=layers)
