"""`headroom extract`: a KernelBench problem with the real shapes, from a module (or an op) of a workload.

    build (constructor arguments recorded) -> one real step (calls recorded) -> a short profile
    (module ranges; the part's share) -> DIR/<workload>__<CLASS>.py + .toml -> self-check

The self-check imports the written problem, builds `Model(*get_init_inputs())`, loads the
original instance's state_dict into it (strict) and runs both on `get_inputs()`: the outputs
must be identical, or extract fails (a bug, never a silently wrong problem).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from headroom.devices import resolve_device
from headroom.errors import UserError
from headroom.extract.capture import Capture, capture, find_class, record_constructions
from headroom.extract.part import part_masks, part_time
from headroom.extract.problem import Share, module_problem, module_selectors, selector_entry
from headroom.extract.record import module_ranges, record_trace, remove
from headroom.extract.result import ExtractResult, header_config, safe_name
from headroom.files import check_output_dir, check_output_not_input, write_atomic
from headroom.jsonio import plain
from headroom.profile.progress import Progress, _stage
from headroom.profile.registry import get_workload, load_workload_file
from headroom.profile.workload import Options, RunConfig, WorkloadSpec, file_stem
from headroom.pyfile import import_file

OP_PREFIX = "op:"


def share_of(analysis: Any, paths: list[str], source: str) -> Share:
    pt = part_time(analysis, paths)
    return Share(
        source=source,
        mode=pt.mode,
        us_per_step=pt.us,
        total_us_per_step=pt.total_us,
        forward_us_per_step=pt.forward_us,
        backward_us_per_step=pt.backward_us,
        kernels_per_step=pt.kernels,
    )


def self_check(problem: Path, original: Any, device: Any, n_grads: int = 0, autocast: str | None = None) -> None:
    """The written problem builds, takes the original's state_dict, and computes what the original does.

    `n_grads`: a training problem's trailing upstream-gradient inputs (its forward returns the
    outputs first). `autocast`: the dtype the workload autocast the module's calls to."""
    import contextlib

    import torch

    mod = import_file(problem, "extracted")
    with torch.device(device):
        model = mod.Model(*mod.get_init_inputs())
        inputs = list(mod.get_inputs())
    model = model.to(device)
    try:
        model.load_state_dict(original.state_dict(), strict=True)
    except RuntimeError as e:
        raise UserError(
            f"extract wrote a problem whose Model does not take the original's state_dict "
            f"({str(e).splitlines()[0]}); a bug: please report it"
        ) from None
    model.train(original.training)
    ctx = (
        torch.autocast(device_type=device.type, dtype=getattr(torch, autocast))
        if autocast
        else contextlib.nullcontext()
    )
    with torch.no_grad():
        got = model(*inputs)
        with ctx:
            want = original(*(inputs[:-n_grads] if n_grads else inputs))
    want_l = list(want) if isinstance(want, (tuple, list)) else [want]
    got_l = (list(got) if isinstance(got, (tuple, list)) else [got])[: len(want_l)]
    for g, w in zip(got_l, want_l):
        if not isinstance(w, torch.Tensor) or torch.equal(g, w):
            continue
        # the same code on other memory layouts may pick other kernels (reduction order): ~1 ulp
        rel = float((g.double() - w.double()).norm() / w.double().norm().clamp_min(1e-30))
        tol = 1e-5 if w.dtype in (torch.float32, torch.float64) else 1e-2
        if not w.is_floating_point() or rel > tol:
            raise UserError(
                f"extract wrote a problem that does not reproduce {type(original).__name__}: its output "
                f"differs from the original's (relative L2 {rel:.3g}); a bug: please report it"
            )


def extract(
    workload: str | WorkloadSpec,
    module: str,
    options: Options | None = None,
    *,
    device: str | None = "auto",
    out: str | os.PathLike = "out/problems",
    trace: str | os.PathLike | None = None,
    window: str | None = None,
    profile: bool = True,
    workload_file: str | os.PathLike | None = None,
    command: str | None = None,
    progress: Progress | None = None,
) -> ExtractResult:
    """Write DIR/<workload>__<CLASS>.py (KernelBench format) and its selector entry DIR/<...>.toml.

    `trace`: measure the share of time there instead of in a 1-step profile (`window`: its steps are the
    CPU ranges whose name matches, as `headroom classify --window`)."""

    progress = progress or Progress()
    options = options or Options()
    if workload_file is not None:
        load_workload_file(workload_file)
    spec = workload if isinstance(workload, WorkloadSpec) else get_workload(workload)
    if not module or not module.strip():
        raise UserError("--module needs a class name (e.g. LlamaRMSNorm) or op:aten::NAME")
    dev = resolve_device(device)
    cfg = spec.resolve(options, dev.type)
    command = command or " ".join(shlex.quote(a) for a in sys.argv)
    if trace is not None and not Path(trace).is_file():
        raise UserError(f"{trace}: no such trace file")
    # A read-only or impossible --out fails now, not after the build and the capture.
    out_dir = check_output_dir(out, create=False)
    if module.startswith(OP_PREFIX):
        from headroom.extract.ops import extract_op

        return extract_op(
            spec,
            cfg,
            dev,
            module[len(OP_PREFIX) :],
            out_dir,
            trace=trace,
            window=window,
            command=command,
            progress=progress,
        )
    return _extract_module(spec, cfg, dev, module, out_dir, trace, window, profile, workload_file, command, progress)


def _extract_module(
    spec: WorkloadSpec,
    cfg: RunConfig,
    dev: Any,
    module: str,
    out_dir: Path,
    trace: str | os.PathLike | None,
    window: str | None,
    profile: bool,
    workload_file: str | os.PathLike | None,
    command: str,
    progress: Progress,
) -> ExtractResult:
    """A module class's extraction: its constructions recorded during the build, one step captured, the problem
    written and checked against the module, its share of the step measured."""
    import torch

    torch.manual_seed(0)
    cls = find_class(spec, cfg, module)
    name = f"{file_stem(spec.name)}__{safe_name(cls.__name__)}"
    for written in (f"{name}.py", f"{name}.toml", f"{name}.trace.json.gz"):
        check_output_not_input(out_dir / written, [trace, workload_file])
    step = None
    try:
        with _stage(
            progress,
            "build",
            f"{spec.name} ({cfg.variant}, batch {cfg.batch}, {cfg.dtype}), recording {cls.__name__}(...)",
        ):
            with record_constructions(cls) as built:
                step = spec.build(cfg, dev)
        with _stage(progress, "capture", f"one step with a hook on every {cls.__name__}"):
            cap: Capture = capture(step, cls, built)
        with tempfile.TemporaryDirectory(prefix=".headroom-extract-", dir=_tmp_parent(out_dir)) as tmp:
            share, notes = _share(
                step,
                cap,
                cls.__name__,
                dev,
                cfg,
                trace,
                window,
                profile,
                Path(tmp) / f"{name}.trace.json.gz",
                command,
                progress,
            )
            selectors = module_selectors(cls.__name__, step.train)
            source = module_problem(
                cap,
                name=name,
                workload=spec.name,
                config=header_config(cfg),
                train=step.train,
                share=share,
                command=command,
            )
            _check_problem(Path(tmp) / f"{name}.py", source, cap, step.train, dev, progress)
            note = f"{cls.__name__} in {spec.name} ({cfg.variant}): {cap.calls_per_step} calls per step" + (
                "; forward and backward" if step.train else ""
            )
            keep_trace = share is not None and trace is None
            problem_path, entry_path, trace_path = _write(
                out_dir, name, Path(tmp), source, selector_entry(name, selectors, note), keep_trace
            )
    finally:
        if step is not None:
            step.close()
    return ExtractResult(
        name=name,
        problem=problem_path,
        entry=entry_path,
        trace=trace_path,
        selectors=selectors,
        share=share,
        calls_per_step=cap.calls_per_step,
        instances=cap.paths,
        config=header_config(cfg),
        notes=notes,
    )


def _check_problem(path: Path, source: str, cap: Capture, train: bool, dev: Any, progress: Progress) -> None:
    """The problem written to `path` rebuilds the captured module and matches its outputs (and gradients)."""
    path.write_text(source)
    with _stage(progress, "check", "the written problem rebuilds the module and matches it"):
        call, _ = cap.common_call()
        n_grads = (len(call.output) if isinstance(call.output, tuple) else 1) if train else 0
        self_check(path, cap.instances[0][1], dev, n_grads, call.autocast)


def _write(
    out_dir: Path, name: str, tmp: Path, source: str, entry: str, keep_trace: bool
) -> tuple[Path, Path, Path | None]:
    """The problem, its selector entry and (`keep_trace`: the 1-step profile measured its share) the profile's
    trace, written into `out_dir`; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    problem_path, entry_path = out_dir / f"{name}.py", out_dir / f"{name}.toml"
    write_atomic(entry_path, entry)
    trace_path = None
    if keep_trace:
        trace_path = out_dir / f"{name}.trace.json.gz"
        shutil.move(str(tmp / f"{name}.trace.json.gz"), str(trace_path))  # across file systems too
    write_atomic(problem_path, source)
    return problem_path, entry_path, trace_path


def _share(
    step: Any,
    cap: Capture,
    cls_name: str,
    dev: Any,
    cfg: Any,
    trace: str | os.PathLike | None,
    window: str | None,
    profile: bool,
    tmp_trace: Path,
    command: str,
    progress: Progress,
) -> tuple[Share | None, list[str]]:
    """The instances' share of the step's time: measured in `trace` when given, else in a 1-step profile with
    module ranges written to `tmp_trace` (None without either); and the trace's notes."""
    if trace is not None:
        from headroom.trace.analysis import analyze

        a = analyze(trace, window=window)
        notes = [f"{a.source}: {n}" for n in a.notes]
        if not part_masks(a, cap.paths)["all"].any():
            # A share of 0 % would be a wrong number, not a measurement: the trace is of
            # another workload (or has no module ranges), so none of these instances ran in it.
            raise UserError(
                f"--trace {trace}: no kernel of the {len(cap.paths)} {cls_name} "
                f"instance(s) (e.g. {cap.paths[0]}) is in this trace: it is of "
                f"another workload or has no module ranges (`headroom profile` records them)"
            )
        return share_of(a, cap.paths, str(trace)), notes
    if not profile:
        return None, []
    with _stage(progress, "profile", "1 step with module ranges (the share of time)"):
        handles = module_ranges(step)
        try:
            record_trace(step, dev, tmp_trace, {"tool": "headroom extract", **plain(cfg), "command": command}, steps=1)
        finally:
            remove(handles)
        from headroom.trace.analysis import analyze

        return share_of(analyze(tmp_trace), cap.paths, tmp_trace.name), []


def _tmp_parent(out_dir: Path) -> str | None:
    """Temporary files beside the output (same file system: renames are atomic), when it exists."""
    p = out_dir if out_dir.is_dir() else out_dir.parent
    return str(p) if p.is_dir() else None
