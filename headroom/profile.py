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
import gzip
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ContextManager, Iterator

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.workload import (BLOCK_RANGE_PREFIX, Options, RunConfig, Step, WorkloadSpec, get_workload,
                               instrument_blocks, load_workload_file, nvtx_backend, nvtx_pop, nvtx_push)

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = 1

# Steps per phase: (warm-up, timed, profiled) on a GPU and on a CPU.
GPU_STEPS = (3, 10, 3)
CPU_STEPS = (1, 3, 1)


# --- progress -------------------------------------------------------------------


class Progress:
    """Callbacks for the phases; the CLI renders them, the API is quiet by default."""

    def phase(self, name: str, detail: str = "") -> ContextManager[None]:
        return nullcontext()

    def note(self, message: str) -> None:
        pass


@contextmanager
def _phase(progress: Progress, name: str, detail: str = "") -> Iterator[None]:
    nvtx_push(f"headroom/{name}")
    try:
        with progress.phase(name, detail):
            yield
    finally:
        nvtx_pop()


# --- results --------------------------------------------------------------------


@dataclass
class StepStats:
    """Per-step times in milliseconds and how they were measured."""

    times_ms: list[float]
    method: str

    @property
    def n(self) -> int:
        return len(self.times_ms)

    @property
    def median_ms(self) -> float:
        return float(statistics.median(self.times_ms)) if self.times_ms else float("nan")

    @property
    def mean_ms(self) -> float:
        return float(statistics.fmean(self.times_ms)) if self.times_ms else float("nan")

    @property
    def min_ms(self) -> float:
        return float(min(self.times_ms)) if self.times_ms else float("nan")

    @property
    def max_ms(self) -> float:
        return float(max(self.times_ms)) if self.times_ms else float("nan")

    @property
    def stdev_ms(self) -> float:
        return float(statistics.stdev(self.times_ms)) if len(self.times_ms) > 1 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "method": self.method, "median_ms": self.median_ms, "mean_ms": self.mean_ms,
                "min_ms": self.min_ms, "max_ms": self.max_ms, "stdev_ms": self.stdev_ms,
                "times_ms": [round(t, 4) for t in self.times_ms]}


@dataclass
class LayerExtrapolation:
    """Category times with per-block work scaled from `built` to `total` blocks.

    Per-step microseconds. `categories` rows: name, addressable, measured_us,
    block_us (of measured_us), us (extrapolated), fraction (extrapolated, of
    extrapolated total), measured_fraction.
    """

    built: int
    total: int
    block_ranges: int
    step_us: float
    step_us_extrapolated: float
    block_span_us: float
    total_us: float
    total_us_extrapolated: float
    block_us: float
    addressable_fraction: float
    addressable_fraction_measured: float
    idle_fraction: float
    categories: pd.DataFrame
    timed_step_ms_extrapolated: float | None = None

    @property
    def factor(self) -> float:
        return self.total / self.built

    @property
    def block_share(self) -> float:
        """Share of the measured kernel time that is inside blocks."""
        return self.block_us / self.total_us if self.total_us > 0 else 0.0

    def fractions(self) -> dict[str, float]:
        return {r.name: float(r.fraction) for r in self.categories.itertuples(index=False)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "built_layers": self.built, "total_layers": self.total, "factor": self.factor,
            "block_ranges": self.block_ranges, "block_share": self.block_share,
            "step_us": self.step_us, "step_us_extrapolated": self.step_us_extrapolated,
            "timed_step_ms_extrapolated": self.timed_step_ms_extrapolated,
            "block_span_us": self.block_span_us, "total_us": self.total_us,
            "total_us_extrapolated": self.total_us_extrapolated,
            "addressable_fraction": self.addressable_fraction,
            "addressable_fraction_measured": self.addressable_fraction_measured,
            "idle_fraction": self.idle_fraction,
            "categories": [
                {"name": r.name, "addressable": bool(r.addressable), "measured_us": float(r.measured_us),
                 "block_us": float(r.block_us), "us": float(r.us), "fraction": float(r.fraction),
                 "measured_fraction": float(r.measured_fraction)}
                for r in self.categories.itertuples(index=False)
            ],
        }


@dataclass
class ProfileResult:
    workload: str
    config: RunConfig
    trace_path: Path
    manifest_path: Path
    manifest: dict[str, Any]
    timed: StepStats
    profiled: StepStats
    analysis: Any                      # headroom.analysis.Analysis
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


# --- environment / manifest -----------------------------------------------------


def _pkg_version(*names: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for n in names:
        try:
            return version(n)
        except PackageNotFoundError:
            continue
    return None


def _nvidia_smi() -> dict[str, str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run([exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=15).stdout.strip().splitlines()
    except Exception:
        return {}
    if not out:
        return {}
    parts = [p.strip() for p in out[0].split(",")]
    return {"name": parts[0], "driver": parts[1] if len(parts) > 1 else "",
            "memory": parts[2] if len(parts) > 2 else ""}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: Any) -> dict[str, Any]:
    """How the numbers were made: hardware, driver, library versions, numeric flags."""
    import torch

    import headroom

    env: dict[str, Any] = {
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "transformers": _pkg_version("transformers"),
            "torchrec": _pkg_version("torchrec"),
            "fbgemm_gpu": _pkg_version("fbgemm-gpu", "fbgemm_gpu", "fbgemm-gpu-cpu", "fbgemm_gpu_cpu"),
            "headroom": headroom.__version__,
            "nvtx": nvtx_backend(),
        },
        "tf32": {
            "matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        },
        "cpu": {"model": _cpu_model(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads()},
        "platform": platform.platform(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        smi = _nvidia_smi()
        env["gpu"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gb": round(props.total_memory / 2**30, 1),
            "count": torch.cuda.device_count(),
            "driver": smi.get("driver"),
        }
    else:
        env["gpu"] = None
    return env


# --- trace writing ----------------------------------------------------------------


def _inject_and_compress(raw_json: Path, manifest: dict[str, Any], dest: Path) -> None:
    """Put the manifest under a top-level "headroom" key, gzip to a temp file, rename to `dest`."""
    data = raw_json.read_bytes()
    brace = data.find(b"{")
    if brace < 0:
        raise RuntimeError(f"{raw_json}: the profiler wrote no JSON object")
    head = b'"headroom": ' + json.dumps(manifest, default=str).encode() + b",\n"
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=6, mtime=0) as gz:
                gz.write(data[:brace + 1])
                gz.write(head)
                gz.write(data[brace + 1:])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def update_manifest(out_dir: Path, trace_name: str, entry: dict[str, Any]) -> Path:
    """`manifest.json` beside the traces: one entry per trace file, merged with what is there."""
    path = out_dir / MANIFEST_NAME
    doc: dict[str, Any] = {"schema": MANIFEST_SCHEMA, "traces": {}}
    if path.exists():
        try:
            old = json.loads(path.read_text())
            if isinstance(old, dict) and isinstance(old.get("traces"), dict):
                doc["traces"] = old["traces"]
        except (OSError, ValueError):
            pass
    doc["traces"][trace_name] = entry
    doc["traces"] = dict(sorted(doc["traces"].items()))
    write_json_atomic(path, doc)
    return path


# --- timing ---------------------------------------------------------------------------


class _Timer:
    """Per-step times: CUDA events (no host sync between steps) or a wall clock."""

    def __init__(self, device: Any):
        import torch

        self.cuda = device.type == "cuda"
        self._torch = torch
        self._events: list[tuple[Any, Any]] = []
        self._wall: list[float] = []

    @property
    def method(self) -> str:
        return "cuda-events" if self.cuda else "wall-clock"

    @contextmanager
    def step(self) -> Iterator[None]:
        if self.cuda:
            start = self._torch.cuda.Event(enable_timing=True)
            end = self._torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._events.append((start, end))
        else:
            t0 = time.perf_counter()
            yield
            self._wall.append((time.perf_counter() - t0) * 1e3)

    def results(self, keep: slice = slice(None)) -> StepStats:
        if self.cuda:
            self._torch.cuda.synchronize()
            times = [s.elapsed_time(e) for s, e in self._events]
        else:
            times = list(self._wall)
        return StepStats(times[keep], self.method)


def _sync(device: Any) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


# --- layer extrapolation ------------------------------------------------------------------


def block_mask(events: pd.DataFrame, ranges: pd.DataFrame) -> np.ndarray:
    """Which events were launched (GPU) or ran (CPU ops) inside a block range on the same thread.

    Returns the index of the containing range per event, -1 outside every block.
    """
    from headroom.attribute import containing_range

    out = np.full(len(events), -1, dtype=np.int64)
    if len(events) == 0 or len(ranges) == 0:
        return out
    when = events["launch_ts"].to_numpy(dtype=float) if "launch_ts" in events else events["ts"].to_numpy(dtype=float)
    when = np.where(np.isnan(when), events["ts"].to_numpy(dtype=float), when)
    ev_tid = events["launch_tid"].astype(str).to_numpy() if "launch_tid" in events else None
    r_ts = ranges["ts"].to_numpy(dtype=float)
    r_end = r_ts + ranges["dur"].to_numpy(dtype=float)
    r_tid = ranges["tid"].astype(str).to_numpy()
    for tid in np.unique(r_tid):
        r_idx = np.flatnonzero(r_tid == tid)
        p_idx = np.flatnonzero(ev_tid == tid) if ev_tid is not None else np.arange(len(events))
        if len(p_idx) == 0:
            continue
        hit = containing_range(r_ts[r_idx], r_end[r_idx], when[p_idx])
        ok = hit >= 0
        out[p_idx[ok]] = r_idx[hit[ok]]
    return out


def extrapolate_layers(analysis: Any, built: int, total: int, ranges: pd.DataFrame | None = None,
                       timed_step_ms: float | None = None) -> LayerExtrapolation | None:
    """Scale the per-block part of each category from `built` blocks to `total`.

    Block work is what ran inside `headroom/block ...` ranges; everything else
    (embeddings, heads, the loss, the optimizer step of non-block parameters,
    idle gaps between blocks) is counted once. Step time: the measured step plus
    (L/N - 1) times the per-step span of block work (first to last kernel of
    each block instance, idle gaps inside blocks included).
    Returns None when the trace has no block ranges.
    """
    if ranges is None:
        cpu = analysis.trace.cpu if analysis.trace is not None else pd.DataFrame()
        ranges = cpu[cpu["name"].astype(str).str.startswith(BLOCK_RANGE_PREFIX)] if len(cpu) else cpu
    if ranges is None or len(ranges) == 0:
        return None
    ev = analysis.events
    idx = block_mask(ev, ranges)
    inb = idx >= 0
    steps = max(int(analysis.num_steps), 1)
    factor = total / built

    dur = ev["dur"].to_numpy(dtype=float)
    cat = ev["category"].astype(str).to_numpy()
    addr = ev["addressable"].to_numpy(dtype=bool)
    measured = pd.Series(dur).groupby(cat).sum()
    block = pd.Series(np.where(inb, dur, 0.0)).groupby(cat).sum()
    addressable_by_cat = pd.Series(addr).groupby(cat).any()
    rows = []
    for name in measured.index:
        m = float(measured[name]) / steps
        b = float(block.get(name, 0.0)) / steps
        rows.append({"name": name, "addressable": bool(addressable_by_cat.get(name, False)),
                     "measured_us": m, "block_us": b, "us": m + (factor - 1.0) * b})
    cats = pd.DataFrame(rows, columns=["name", "addressable", "measured_us", "block_us", "us"])
    total_meas = float(cats["measured_us"].sum())
    total_ext = float(cats["us"].sum())
    cats["fraction"] = cats["us"] / total_ext if total_ext > 0 else 0.0
    cats["measured_fraction"] = cats["measured_us"] / total_meas if total_meas > 0 else 0.0
    cats = cats.sort_values("us", ascending=False).reset_index(drop=True)

    # Span of each block instance, from its first event start to its last event end.
    if inb.any():
        starts = pd.Series(ev["ts"].to_numpy(dtype=float)[inb]).groupby(idx[inb]).min()
        ends = pd.Series(ev["end"].to_numpy(dtype=float)[inb]).groupby(idx[inb]).max()
        span = float((ends - starts).clip(lower=0).sum()) / steps
    else:
        span = 0.0
    step_us = float(analysis.step_us)
    step_ext = step_us + (factor - 1.0) * span
    wall_share = ev["wall_us"].to_numpy(dtype=float) if "wall_us" in ev else dur
    busy = float(wall_share.sum()) / steps
    busy_ext = busy + (factor - 1.0) * float(wall_share[inb].sum()) / steps
    n_dev = max(int(getattr(analysis, "n_devices", 1)), 1)
    idle = max(1.0 - busy_ext / (step_ext * n_dev), 0.0) if step_ext > 0 else 0.0
    addr_meas = float(dur[addr].sum()) / steps
    addr_ext = addr_meas + (factor - 1.0) * float(dur[addr & inb].sum()) / steps
    return LayerExtrapolation(
        built=built, total=total, block_ranges=int(len(np.unique(idx[inb]))) if inb.any() else 0,
        step_us=step_us, step_us_extrapolated=step_ext, block_span_us=span,
        total_us=total_meas, total_us_extrapolated=total_ext, block_us=float(cats["block_us"].sum()),
        addressable_fraction=addr_ext / total_ext if total_ext > 0 else 0.0,
        addressable_fraction_measured=addr_meas / total_meas if total_meas > 0 else 0.0,
        idle_fraction=idle, categories=cats,
        timed_step_ms_extrapolated=(timed_step_ms * step_ext / step_us) if (timed_step_ms and step_us > 0) else None,
    )


# --- OOM ---------------------------------------------------------------------------------


def _is_oom(e: BaseException) -> bool:
    import torch

    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    if oom_types and isinstance(e, oom_types):
        return True
    msg = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in msg.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in msg)


def _oom_error(e: BaseException, spec: WorkloadSpec, cfg: RunConfig, device: Any) -> UserError:
    import torch

    gib = 2**30
    asked = 0.0
    m = re.search(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB)", str(e))
    if m:
        asked = float(m.group(1)) * {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 2**20}[m.group(2)]
    try:
        held = torch.cuda.max_memory_allocated(device) / gib
        cap = torch.cuda.get_device_properties(device).total_memory / gib
    except Exception:
        held, cap = 0.0, 0.0
    need = held + asked
    hint = "a smaller --batch"
    if spec.num_layers is not None:
        hint += " or --layers N (profile N blocks, extrapolate)"
    seq = f" x seq {cfg.seq}" if cfg.seq else ""
    return UserError(f"{spec.name}: CUDA out of memory at batch {cfg.batch}{seq} "
                     f"(needed more than {need:.1f} GiB, the GPU has {cap:.1f} GiB); try {hint}")


# --- the run ---------------------------------------------------------------------------


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
) -> ProfileResult:
    """Run `workload` under torch.profiler; return timing, the trace path and its `Analysis`."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from headroom.analysis import analyze

    progress = progress or Progress()
    options = options or Options()
    if workload_file is not None:
        load_workload_file(workload_file)
    spec = workload if isinstance(workload, WorkloadSpec) else get_workload(workload)
    dev = resolve_device(device)
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

            with _phase(progress, "warm-up", f"{warmup} steps"):
                t0 = time.perf_counter()
                for _ in range(warmup):
                    step()
                _sync(dev)
                warm_s = time.perf_counter() - t0

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
        with _phase(progress, "export", str(trace_path)):
            _inject_and_compress(raw_tmp, manifest, trace_path)
    finally:
        if raw_tmp.exists():
            raw_tmp.unlink()

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
