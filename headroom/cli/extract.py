"""`headroom extract WORKLOAD --module CLASS` and `headroom validate WORKLOAD --replace CLASS=CANDIDATE.py`."""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from pathlib import Path
from typing import List, Optional

import typer

from headroom.errors import UserError

# The workload options of `headroom profile`.
ModeOpt = typer.Option(None, "--mode", help="train or infer (default: the workload's).")
PhaseOpt = typer.Option(None, "--phase", help="prefill or decode (decoder LMs).")
KvOpt = typer.Option(None, "--kv-cache", help="static or dynamic KV cache (decode).")
BatchOpt = typer.Option(None, "--batch", help="Batch size.")
SeqOpt = typer.Option(None, "--seq", help="Sequence length (tokens).")
DtypeOpt = typer.Option(None, "--dtype", help="bf16, fp16 or fp32.")
LayersOpt = typer.Option(None, "--layers", help="Build N of the identical blocks.")
FlavourOpt = typer.Option(None, "--flavour", help="Size preset (e.g. llama-7b --flavour tiny).")
OptOpt = typer.Option([], "--opt", help="Workload option KEY=VALUE (see `headroom workloads -v`).")
DeviceOpt = typer.Option("auto", "--device", help="auto (CUDA when present), cuda or cpu.")
WorkloadFileOpt = typer.Option(None, "--workload-file", help="Python file defining extra workloads.")
FullSizeOpt = typer.Option(False, "--full-size", help="On a CPU, run the real defaults (no scaling).")
NoTf32Opt = typer.Option(False, "--no-tf32", help="Strict fp32 matmuls (TF32 is on by default).")


def _options(mode, phase, kv_cache, batch, seq, dtype, layers, flavour, opt, full_size, no_tf32):
    from headroom.cli.profile import _parse_opts
    from headroom.profile.workload import Options

    return Options(mode=mode, phase=phase, kv_cache=kv_cache, batch=batch, seq=seq, dtype=dtype, layers=layers,
                   flavour=flavour, tf32=not no_tf32, extra=_parse_opts(opt), scale_for_cpu=not full_size)


def _progress():
    from rich.console import Console

    from headroom.cli.profile import RichProgress

    err = Console(stderr=True)
    if not err.is_terminal:
        err = Console(stderr=True, width=160)
    return RichProgress(err)


def extract_cmd(
    workload: str = typer.Argument(..., help="Workload name (see `headroom workloads`)."),
    module: str = typer.Option(..., "--module", "-m", help="Module class (LlamaRMSNorm, or dotted), or op:aten::NAME."),
    out: Path = typer.Option(Path("out/problems"), "--out", help="Directory for the problem and its entry."),
    trace: Optional[Path] = typer.Option(None, "--trace", help=(
        "Measure the share of time in this trace (recorded with module ranges) instead of a 1-step profile; "
        "for op:, the shapes are read from it.")),
    no_profile: bool = typer.Option(False, "--no-profile", help="Do not profile (the header says share unknown)."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as one JSON object."),
    mode: Optional[str] = ModeOpt, phase: Optional[str] = PhaseOpt, kv_cache: Optional[str] = KvOpt,
    batch: Optional[int] = BatchOpt, seq: Optional[int] = SeqOpt, dtype: Optional[str] = DtypeOpt,
    layers: Optional[int] = LayersOpt, flavour: Optional[str] = FlavourOpt, opt: List[str] = OptOpt,
    device: str = DeviceOpt, workload_file: Optional[Path] = WorkloadFileOpt, full_size: bool = FullSizeOpt,
    no_tf32: bool = NoTf32Opt,
) -> None:
    """Write a KernelBench problem with the real shapes for a module (or op) of a workload, and its
    problem -> selector entry for `headroom project --problems`."""
    from headroom.extract import extract

    options = _options(mode, phase, kv_cache, batch, seq, dtype, layers, flavour, opt, full_size, no_tf32)
    command = "headroom " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    guard = contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()
    with guard:
        r = extract(workload, module, options, device=device, out=out, trace=trace, profile=not no_profile,
                    workload_file=workload_file, command=command, progress=_progress())
    if as_json:
        print(json.dumps(r.to_dict()))
        return
    print(f"problem: {r.problem}")
    print(f"entry:   {r.entry}   ({'; '.join(r.selectors)})")
    if r.share is not None:
        print(f"share:   {r.share.describe()}")
    print(f"calls:   {r.calls_per_step} per step")
    print(f"next:    headroom verify {r.problem} CANDIDATE.py --json > verify.json; "
          f"headroom project TRACE --problems {r.entry} --speedups verify.json")


def validate_cmd(
    workload: Optional[str] = typer.Argument(None, help="Workload name (see `headroom workloads`)."),
    replace: Optional[List[str]] = typer.Option(None, "--replace", "-r", help=(
        "CLASS=CANDIDATE.py, repeatable: every instance of CLASS becomes the candidate's ModelNew.")),
    out: Optional[Path] = typer.Option(None, "--out", help=(
        "The run's directory (result.json, run.json, base.json.gz, variant.json.gz); "
        "default out/validate/<workload>__<CLASS>.")),
    from_dir: Optional[Path] = typer.Option(None, "--from", help=(
        "Recompute the result of a saved run from its traces and timings (nothing runs).")),
    rounds: int = typer.Option(7, "--rounds", help="Interleaved rounds (at least 7)."),
    steps_per_round: Optional[int] = typer.Option(None, "--steps-per-round", help=(
        "Steps per block (default: ~0.3 s of steps on a GPU, 0.2 s on a CPU).")),
    profile_steps: Optional[int] = typer.Option(None, "--profile-steps", help="Profiled steps per variant (3)."),
    tolerance: Optional[float] = typer.Option(None, "--tolerance", help=(
        "Relative L2 error allowed per compared tensor (default by dtype: fp32 1e-3, fp16 1e-2, bf16 5e-2).")),
    timeout: float = typer.Option(1800.0, "--timeout", help="Seconds the whole run may take (a hanging candidate)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch CPU threads in the run (CPU timing)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result object (docs/validate.md)."),
    mode: Optional[str] = ModeOpt, phase: Optional[str] = PhaseOpt, kv_cache: Optional[str] = KvOpt,
    batch: Optional[int] = BatchOpt, seq: Optional[int] = SeqOpt, dtype: Optional[str] = DtypeOpt,
    layers: Optional[int] = LayersOpt, flavour: Optional[str] = FlavourOpt, opt: List[str] = OptOpt,
    device: str = DeviceOpt, workload_file: Optional[Path] = WorkloadFileOpt, full_size: bool = FullSizeOpt,
    no_tf32: bool = NoTf32Opt,
) -> None:
    """Swap candidates into a workload: check outputs, measure the end-to-end speedup interleaved,
    profile both, and score the projections made from the base trace alone."""
    from headroom.validate import recompute, validate
    from headroom.jsonio import dumps

    if from_dir is not None:
        if workload or replace:
            raise UserError("--from recomputes a saved run: give no WORKLOAD or --replace with it")
        result = recompute(from_dir)
    else:
        if not workload:
            raise UserError("give a WORKLOAD (see `headroom workloads`) or --from DIR")
        if not replace:
            raise UserError("give at least one --replace CLASS=CANDIDATE.py")
        from headroom.extract.run import safe_name
        from headroom.validate.api import parse_replace

        reps = parse_replace(replace)
        run_dir = out or Path("out/validate") / f"{workload}__{'+'.join(safe_name(c) for c, _ in reps)}"
        options = _options(mode, phase, kv_cache, batch, seq, dtype, layers, flavour, opt, full_size, no_tf32)
        command = "headroom " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        result = validate(workload, reps, options, device=device, out=run_dir, rounds=rounds,
                          steps_per_round=steps_per_round, profile_steps=profile_steps, gate=tolerance,
                          timeout=timeout, workload_file=workload_file, command=command, threads=threads)
        print(f"headroom validate: wrote {run_dir}", file=sys.stderr)
    if as_json:
        print(dumps(result))
        return
    print(render_text(result))


def _x(v) -> str:
    return f"{v:.4f}x" if isinstance(v, (int, float)) else "-"


def _pct(v) -> str:
    return f"{100 * v:+.1f}%" if isinstance(v, (int, float)) else "-"


def render_text(r: dict) -> str:
    m, p, pr, e, b = r["measured"], r["part"], r["projected"], r["error"], r["baseline"]
    reps = ", ".join(f"{x['module']} ({x['instances']}) -> {Path(x['candidate']).name}" for x in r["replacements"])
    lp = p["launches_per_call"]
    cpu = (r.get("detail") or {}).get("trace_mode") == "cpu-ops"
    idle = "a CPU-only trace" if cpu else f"GPU idle {100 * b['idle_fraction']:.1f}% in the trace"
    lines = [
        f"{r['workload']}: {reps}",
        f"  baseline   {b['step_ms']:.3f} ms/step, {idle}" + (" (launch-bound)" if b["launch_bound"] else ""),
        f"  measured   {_x(m['speedup'])}  95% CI [{_x(m['ci'][0])}, {_x(m['ci'][1])}]  "
        f"{m['base_ms']:.3f} -> {m['variant_ms']:.3f} ms, {m['rounds']} interleaved rounds",
        f"  part       {_x(p['speedup'])}  {p['base_us']:.1f} -> {p['variant_us']:.1f} us/step, "
        f"launches per call {lp[0]:.3g} -> {lp[1]:.3g}" if lp[0] is not None else "  part       -",
        f"  projected  Amdahl {_x(pr['amdahl'])} ({_pct(e['amdahl'])}), replay {_x(pr['replay'])} "
        f"({_pct(e['replay'])}), estimate {_x(pr['estimate'])} ({_pct(e['estimate'])})"
        + (f" [{_x(pr['low'])}, {_x(pr['high'])}]" if pr.get("low") is not None else ""),
    ]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command("extract")(extract_cmd)
    app.command("validate")(validate_cmd)
