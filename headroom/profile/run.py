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
* Module ranges (headroom/profile/modules.py): a range per nn.Module call, hooked in
  just before the profiled steps, so the timed steps carry no hook cost
  (docs/modules.md; `--no-module-ranges` leaves them out).
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
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headroom.devices import resolve_device
from headroom.errors import UserError
from headroom.files import check_output_dir
from headroom.jsonio import plain
from headroom.profile.compiled import CompiledModules, compiled_manifest, recording
from headroom.profile.environment import environment
from headroom.profile.graphs import (
    CAPTURE_DIR,
    capture_raw,
    graphs_manifest,
    write_capture,
)
from headroom.profile.manifest import MANIFEST_NAME, MANIFEST_SCHEMA, _inject_and_compress, update_manifest
from headroom.profile.modules import record_module_ranges
from headroom.profile.nvtx import instrument_blocks
from headroom.profile.oom import _is_cpu_oom, _is_oom, oom_error
from headroom.profile.progress import Progress, _stage
from headroom.profile.registry import get_workload, load_workload_file
from headroom.profile.result import ProfileResult, overhead_verdict
from headroom.profile.steps import (
    MODULE_ROOT,
    PROFILER_WAIT,
    PROFILER_WARMUP,
    Recording,
    experimental_config,
    profile_steps,
    time_steps,
    warm_up,
)
from headroom.profile.timer import _sync
from headroom.profile.workload import Options, RunConfig, Step, WorkloadSpec
from headroom.stepstats import StepStats
from headroom.trace.analysis import Analysis, analyze
from headroom.trace.layers import LayerExtrapolation, extrapolate_layers

MODULE_RANGES_NOTE = (
    "modules that run inside torch.compile'd code have no ranges: Inductor fuses across "
    "module boundaries, and the hooks do nothing while Dynamo traces them (no graph breaks)"
)

if TYPE_CHECKING:
    from headroom.profile.rank_context import RankContext

# Steps per stage: (warm-up, timed, profiled) on a GPU and on a CPU.
GPU_STEPS = (3, 10, 3)
CPU_STEPS = (1, 3, 1)


def check_step_counts(steps: int | None, warmup: int | None, timed_steps: int | None) -> None:
    """The stage sizes a user gave (None: the device's default)."""
    if (
        (steps is not None and steps < 1)
        or (timed_steps is not None and timed_steps < 1)
        or (warmup is not None and warmup < 0)
    ):
        raise UserError(
            "--steps and --timed-steps must be at least 1 (the step time is the median of the "
            "timed steps), --warmup at least 0"
        )


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
    modules_ranged: int  # modules with a range per call (headroom/profile/modules.py)
    activities: list[str]
    cuda_sync_events: bool
    capture_s: float | None = None  # --graphs: how long the capture took


def _build(
    spec: WorkloadSpec, cfg: RunConfig, dev: Any, progress: Progress, recorder: CompiledModules | None
) -> tuple[Step, bool, float]:
    """The built step, whether its blocks carry ranges (instrumented here), and how long the build took; a step
    that fails after it was built is closed."""
    what = f"{spec.name} ({cfg.variant}, batch {cfg.batch}{', seq ' + str(cfg.seq) if cfg.seq else ''}, {cfg.dtype})"
    with _stage(progress, "build", what):
        t0 = time.perf_counter()
        step = spec.build(cfg, dev)
        try:
            if recorder is not None and step.modules is not None:  # the class of the paths' root (MODULE_ROOT)
                recorder.root_type = type(step.modules).__name__
            use_ranges = bool(step.blocks) and not (cfg.compile and not cfg.extrapolated)
            if use_ranges:
                step.add_hooks(instrument_blocks(step.blocks, train=cfg.mode == "train"))
            _sync(dev)
        except BaseException:
            step.close()
            raise
        return step, use_ranges, time.perf_counter() - t0


def _measure(
    spec: WorkloadSpec,
    cfg: RunConfig,
    dev: Any,
    counts: tuple[int, int, int],
    raw_trace: Path,
    progress: Progress,
    record_shapes: bool,
    together: Callable[[], None] = lambda: None,
    recorder: CompiledModules | None = None,
) -> _Measured:
    """build -> warm-up -> timed steps (no profiler) -> profiled steps, exported to `raw_trace`.

    `together`: waits for the other ranks of a --nproc run, so each stage starts on all of them at once.
    `recorder`: records the graphs torch.compile makes (headroom/profile/compiled.py)."""
    import torch
    from torch.profiler import ProfilerActivity

    warmup, timed_steps, steps = counts
    step: Step | None = None
    try:
        step, use_ranges, build_s = _build(spec, cfg, dev, progress, recorder)
        activities = [ProfilerActivity.CPU]
        if dev.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        experimental = experimental_config(dev)
        rec = Recording(activities, record_shapes, experimental)
        together()
        warmed = warm_up(step, cfg, dev, warmup, raw_trace, progress, together, rec)
        call, warm_s, module_hooks = warmed.call, warmed.warm_s, warmed.module_hooks

        together()
        timed = time_steps(call, dev, timed_steps, progress)
        # Module ranges only for the profiled steps (the timed steps above ran without their hooks; the
        # profiler's wait and warm-up steps absorb any first-call cost). After the block ranges: nested inside.
        if cfg.module_ranges and step.modules is not None and not cfg.graphs:
            module_hooks = record_module_ranges(step.modules, root=MODULE_ROOT)
            step.add_hooks(module_hooks)
        together()
        profiled = profile_steps(call, dev, steps, raw_trace, progress, rec)
        peak_gb = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None
    except BaseException as e:
        if not isinstance(e, KeyboardInterrupt) and (_is_oom(e) if dev.type == "cuda" else _is_cpu_oom(e)):
            if step is not None:
                step.close()
            step = None
            _free(dev)
            raise oom_error(e, spec, cfg, dev) from None
        raise
    finally:
        if step is not None:
            step.close()
    measured = _Measured(
        timed=timed,
        profiled=profiled,
        build_s=build_s,
        warmup_s=warm_s,
        peak_gb=peak_gb,
        params=step.params,
        info=dict(step.info),
        block_ranges=use_ranges,
        modules_ranged=len(module_hooks) // 2,
        activities=[a.name for a in activities],
        cuda_sync_events=experimental is not None,
        capture_s=warmed.capture_s,
    )
    step = None
    _free(dev)
    return measured


def _results(analysis: Analysis, layers: LayerExtrapolation | None) -> dict[str, Any]:
    """The manifest entry's `results`: what the analysis of the new trace found."""
    return {
        "mode": analysis.mode,
        "step_us_profiled": analysis.step_us,
        "idle_fraction": analysis.idle_fraction,
        "addressable_fraction": analysis.addressable_fraction,
        "categories": {r.name: float(r.fraction) for r in analysis.categories.itertuples(index=False)},
        "layers": plain(layers) if layers else None,
        "module_ranges_recorded": len(analysis.modules),
    }


def _run_manifest(
    spec: WorkloadSpec,
    cfg: RunConfig,
    dev: Any,
    m: _Measured,
    counts: tuple[int, int, int],
    record_shapes: bool,
    command: str | None,
    started: datetime,
    name: str,
) -> dict[str, Any]:
    """How the numbers were made: the configuration, the environment, the timing (docs/workloads.md)."""
    t, p = m.timed, m.profiled
    overhead = p.median_ms / t.median_ms - 1.0 if t.n and t.median_ms > 0 else None
    measurable = overhead_verdict(t, p)[0]
    return {
        "schema": MANIFEST_SCHEMA,
        "tool": "headroom profile",
        **plain(cfg),
        "domain": spec.domain,
        "model": spec.model,
        "params": m.params,
        # The whole model's count when only some blocks were built (the scaling chart's x).
        **({"params_full": spec.param_count_meta(cfg.flavour)} if cfg.extrapolated else {}),
        "info": m.info,
        "block_ranges": m.block_ranges,
        "module_ranges": {
            "hooked": m.modules_ranged,
            "root": MODULE_ROOT,
            "compiled": cfg.compile,
            "note": MODULE_RANGES_NOTE if cfg.compile else "",
        },
        "device_type": dev.type,
        **environment(dev),
        "profiler": {
            "schedule": {"wait": PROFILER_WAIT, "warmup": PROFILER_WARMUP, "active": counts[2]},
            "record_shapes": record_shapes,
            "with_stack": False,
            "activities": m.activities,
            "cuda_sync_events": m.cuda_sync_events,
        },
        "steps": {"warmup": counts[0], "timed": counts[1], "profiled": counts[2]},
        "timing": {
            "step_ms": t.median_ms,
            "timed": plain(t),
            "profiled": plain(p),
            "overhead": overhead,
            "overhead_measurable": measurable,
            "build_s": round(m.build_s, 2),
            "warmup_s": round(m.warmup_s, 2),
        },
        **({"graphs": graphs_manifest(cfg, name, m.capture_s)} if m.capture_s is not None else {}),
        "peak_memory_gb": round(m.peak_gb, 2) if m.peak_gb is not None else None,
        "command": command or " ".join(shlex.quote(a) for a in sys.argv),
        "date": started.isoformat(timespec="seconds"),
        "trace": name,
    }


def _step_counts(dev: Any, warmup: int | None, timed_steps: int | None, steps: int | None) -> tuple[int, int, int]:
    """(warm-up, timed, profiled) steps: those given, the device's defaults for the others; checked."""
    d_warm, d_timed, d_prof = GPU_STEPS if dev.type == "cuda" else CPU_STEPS
    counts = (
        d_warm if warmup is None else warmup,
        d_timed if timed_steps is None else timed_steps,
        d_prof if steps is None else steps,
    )
    check_step_counts(counts[2], counts[0], counts[1])
    return counts


def _announce(progress: Progress, dev: Any, cfg: RunConfig) -> None:
    """The notes on what runs other than as asked: on the CPU, scaled for it, some blocks of many."""
    if dev.type == "cpu":
        progress.note("no CUDA device: running on the CPU; the trace is classified by CPU operator")
    for note in cfg.notes:
        progress.note(f"scaled for the CPU: {note}")
    if cfg.extrapolated and cfg.layers is not None and cfg.total_layers is not None:
        progress.note(
            f"profiling {cfg.layers} of {cfg.total_layers} blocks; per-block time is scaled "
            f"x{cfg.total_layers / cfg.layers:g} (embeddings and heads counted once)"
        )


def _set_up_torch(dev: Any, cfg: RunConfig) -> None:
    """TF32 as configured, the peak memory counter reset, the seed fixed."""
    import torch

    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
        torch.backends.cudnn.allow_tf32 = cfg.tf32
        torch.cuda.reset_peak_memory_stats(dev)
    torch.manual_seed(0)


def _classified(
    trace: Path, cfg: RunConfig, measured: _Measured, progress: Progress
) -> tuple[Analysis, LayerExtrapolation | None]:
    """The new trace's analysis, and with block ranges of some blocks of many, the whole model's extrapolation."""
    timed = measured.timed
    layers = None
    with _stage(progress, "classify"):
        analysis = analyze(trace)
        if measured.block_ranges and cfg.layers is not None and cfg.total_layers is not None:
            layers = extrapolate_layers(
                analysis, cfg.layers, cfg.total_layers, timed_step_ms=timed.median_ms if timed.n else None
            )
    return analysis, layers


def profile_workload(
    workload: str | WorkloadSpec,
    options: Options | None = None,
    *,
    device: str | None = "auto",
    out: str | os.PathLike = "out",
    steps: int | None = None,
    warmup: int | None = None,
    timed_steps: int | None = None,
    workload_file: str | os.PathLike | None = None,
    progress: Progress | None = None,
    command: str | None = None,
    record_shapes: bool = True,
    trace_name: str | None = None,
    rank: RankContext | None = None,
) -> ProfileResult:
    """Run `workload` under torch.profiler; return timing, the trace path and its `Analysis`.

    `steps`/`warmup`/`timed_steps`: profiled, warm-up and unprofiled timed steps (None: GPU_STEPS or CPU_STEPS).
    `rank`: this process's place in a `--nproc` run (headroom.profile.launch): each stage starts on every
    rank at once, the manifest says which rank this is, and the parent writes manifest.json and
    analyses the ranks together (`analysis` is None here).
    """
    progress = progress or Progress()
    options = options or Options()
    if workload_file is not None:
        load_workload_file(workload_file)
    spec = workload if isinstance(workload, WorkloadSpec) else get_workload(workload)
    dev = rank.device if rank is not None else resolve_device(device)
    cfg = spec.resolve(options, dev.type)
    counts = _step_counts(dev, warmup, timed_steps, steps)
    out_dir = check_output_dir(out)  # now, not after the run
    _announce(progress, dev, cfg)

    name = trace_name or f"{cfg.tag}.json.gz"
    trace_path, raw_tmp, new_trace = _trace_paths(out_dir, name)

    _set_up_torch(dev, cfg)
    together = rank.barrier if rank is not None else (lambda: None)  # each stage starts on every rank at once
    started = datetime.now(timezone.utc)
    try:
        with recording(dev.type) if cfg.compile else nullcontext() as recorder:
            measured = _measure(spec, cfg, dev, counts, raw_tmp, progress, record_shapes, together, recorder)
        manifest = _run_manifest(spec, cfg, dev, measured, counts, record_shapes, command, started, name)
        _add_run_parts(manifest, cfg, recorder, rank)
        with _stage(progress, "export", str(trace_path)):
            _inject_and_compress(raw_tmp, manifest, new_trace)
            if "graphs" in manifest:
                write_capture(raw_tmp, manifest, out_dir / CAPTURE_DIR / name)
        raw_tmp.unlink()
        analysis, layers = None, None
        if rank is None:  # a --nproc rank's trace is analysed by the parent, with the other ranks
            analysis, layers = _classified(new_trace, cfg, measured, progress)
        try:
            os.replace(new_trace, trace_path)
        except OSError as e:
            raise UserError(f"{trace_path}: cannot write ({e.strerror or e})") from None
    finally:
        for tmp in (raw_tmp, new_trace, capture_raw(raw_tmp)):
            if tmp.exists():
                tmp.unlink()
    result = ProfileResult(
        workload=spec.name,
        config=cfg,
        trace_path=trace_path,
        manifest_path=out_dir / MANIFEST_NAME,
        manifest=manifest,
        timed=measured.timed,
        profiled=measured.profiled,
        analysis=analysis,
        layers=layers,
    )
    return result if rank is not None else _recorded(result, out_dir, name)


def _trace_paths(out_dir: Path, name: str) -> tuple[Path, Path, Path]:
    """The trace's path, the profiler's raw export, and the new trace before it replaces the old: the new trace is
    classified before it replaces an existing one of the same name, so a run that fails (or a trace headroom
    cannot read) leaves the old trace in place."""
    trace_path = out_dir / name
    if trace_path.is_dir():
        raise UserError(f"{trace_path}: is a directory, expected a trace file name")
    return trace_path, out_dir / f".{name}.{os.getpid()}.raw.json", out_dir / f".{name}.{os.getpid()}.partial"


def _add_run_parts(
    manifest: dict[str, Any], cfg: RunConfig, recorder: CompiledModules | None, rank: RankContext | None
) -> None:
    """The manifest's entries of a compiled run (each post-grad node's module) and of one rank of a --nproc run."""
    if recorder is not None:
        # Whole-model compiles run under no module range: their paths are below MODULE_ROOT. A block's
        # compiled forward runs inside the block's range (--layers), which gives the paths' base.
        manifest["compiled_modules"] = compiled_manifest(recorder, "" if cfg.extrapolated else MODULE_ROOT)
    if rank is not None:
        manifest["distributed"] = plain(rank)


def _recorded(result: ProfileResult, out_dir: Path, name: str) -> ProfileResult:
    """A single-process run's result, its analysis pointing at the trace's final path, with the trace's entry
    (and what its analysis found) written to manifest.json."""
    analysis = result.analysis
    assert analysis is not None, "the trace of a single-process run is analysed"
    analysis.source = str(result.trace_path)
    if analysis.trace is not None:
        analysis.trace.source = str(result.trace_path)
    results = _results(analysis, result.layers)
    result.manifest_path = update_manifest(out_dir, name, dict(result.manifest, results=results))
    return result
