"""`headroom extract WORKLOAD --module CLASS` and `headroom validate WORKLOAD --replace CLASS=CANDIDATE.py`."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from headroom.cli.common import WindowOpt
from headroom.cli.output import emit_json, warn
from headroom.cli.profile import Device, DType, KVCache, Mode, Phase
from headroom.errors import UserError
from headroom.jsonio import plain

if TYPE_CHECKING:  # annotations only: the command imports the validate package when it runs
    from headroom.validate.result import ValidateResult

# The workload options of `headroom profile`.
ModeOpt = typer.Option(None, "--mode", case_sensitive=False, help="Default: the workload's.")
PhaseOpt = typer.Option(None, "--phase", case_sensitive=False, help="Decoder LMs.")
KvOpt = typer.Option(None, "--kv-cache", case_sensitive=False, help="KV cache (decode).")
BatchOpt = typer.Option(None, "--batch", min=1, help="Batch size.")
SeqOpt = typer.Option(None, "--seq", min=1, help="Sequence length (tokens).")
DtypeOpt = typer.Option(None, "--dtype", case_sensitive=False, help="Default: the workload's.")
LayersOpt = typer.Option(None, "--layers", min=1, help="Build N of the identical blocks.")
FlavourOpt = typer.Option(None, "--flavour", metavar="NAME", help="Size preset (e.g. llama-7b --flavour tiny).")
OptOpt = typer.Option([], "--opt", metavar="KEY=VALUE", help="Workload option (see `headroom workloads -v`).")
DeviceOpt = typer.Option("auto", "--device", case_sensitive=False, help="auto: CUDA when present.")
WorkloadFileOpt = typer.Option(None, "--workload-file", metavar="FILE", help="Python file defining extra workloads.")
FullSizeOpt = typer.Option(False, "--full-size", metavar="", help="On a CPU, run the real defaults (no scaling).")
NoTf32Opt = typer.Option(False, "--no-tf32", metavar="", help="Strict fp32 matmuls (TF32 is on by default).")
WorkloadArg = typer.Argument(..., metavar="WORKLOAD", help="Workload name (see `headroom workloads`).")


def _options(mode, phase, kv_cache, batch, seq, dtype, layers, flavour, opt, full_size, no_tf32):
    from headroom.cli.profile import _parse_opts
    from headroom.profile.workload import Options

    value = lambda e: e.value if e is not None else None  # noqa: E731
    return Options(
        mode=value(mode),
        phase=value(phase),
        kv_cache=value(kv_cache),
        batch=batch,
        seq=seq,
        dtype=value(dtype),
        layers=layers,
        flavour=flavour,
        tf32=not no_tf32,
        extra=_parse_opts(opt),
        scale_for_cpu=not full_size,
    )


def extract_cmd(
    workload: str = WorkloadArg,
    module: str = typer.Option(
        ..., "--module", "-m", metavar="CLASS", help="Module class (LlamaRMSNorm, or dotted), or op:aten::NAME."
    ),
    out: Path = typer.Option(
        Path("out/problems"), "--out", metavar="DIR", help="Directory for the problem and its entry."
    ),
    trace: Path | None = typer.Option(
        None,
        "--trace",
        metavar="TRACE",
        help=(
            "Measure the share of time in this trace (recorded with module ranges) instead of a 1-step profile; "
            "for op:, the shapes are read from it."
        ),
    ),
    window: str | None = WindowOpt,
    no_profile: bool = typer.Option(
        False, "--no-profile", metavar="", help="Do not profile (the header says share unknown)."
    ),
    as_json: bool = typer.Option(False, "--json", metavar="", help="One JSON document (docs/cli.md)."),
    mode: Mode | None = ModeOpt,
    phase: Phase | None = PhaseOpt,
    kv_cache: KVCache | None = KvOpt,
    batch: int | None = BatchOpt,
    seq: int | None = SeqOpt,
    dtype: DType | None = DtypeOpt,
    layers: int | None = LayersOpt,
    flavour: str | None = FlavourOpt,
    opt: list[str] = OptOpt,
    device: Device = DeviceOpt,
    workload_file: Path | None = WorkloadFileOpt,
    full_size: bool = FullSizeOpt,
    no_tf32: bool = NoTf32Opt,
) -> None:
    """Write a KernelBench problem with the real shapes for a module (or op) of a workload, and its
    problem -> selector entry for `headroom project --problems`."""
    from headroom.cli.profile import RichProgress
    from headroom.extract import extract

    if window is not None and trace is None:
        raise UserError("--window picks the steps of --trace TRACE: give both")
    options = _options(mode, phase, kv_cache, batch, seq, dtype, layers, flavour, opt, full_size, no_tf32)
    command = "headroom " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    progress = RichProgress()
    # Library chatter (the model's build, the profiler) never reaches stdout: --json stays parseable.
    with progress.capturing():
        r = extract(
            workload,
            module,
            options,
            device=device.value,
            out=out,
            trace=trace,
            window=window,
            profile=not no_profile,
            workload_file=workload_file,
            command=command,
            progress=progress,
        )
    for note in r.notes:
        warn(note)
    if as_json:
        emit_json("extract", plain(r))
        return
    print(f"problem: {r.problem}")
    print(f"entry:   {r.entry}   ({'; '.join(r.selectors)})")
    if r.share is not None:
        print(f"share:   {r.share.describe()}")
    print(f"calls:   {r.calls_per_step} per step")
    print(
        f"next:    headroom verify {r.problem} CANDIDATE.py --json > verify.json; "
        f"headroom project TRACE --problems {r.entry} --speedups verify.json"
    )


ReplaceOpt = typer.Option(
    None,
    "--replace",
    "-r",
    metavar="CLASS=CANDIDATE.py",
    help=("Repeatable: every instance of CLASS becomes the candidate's ModelNew."),
)
OutOpt = typer.Option(
    None,
    "--out",
    metavar="DIR",
    help=(
        "The run's directory (result.json, run.json, base.json.gz, variant.json.gz); "
        "default out/validate/<workload>__<CLASS>."
    ),
)
FromDirOpt = typer.Option(
    None,
    "--from",
    metavar="DIR",
    help=("Recompute the result of a saved run from its traces and timings (nothing runs)."),
)
RoundsOpt = typer.Option(6, "--rounds", help=("Interleaved rounds at least (6); more run until the interval is tight."))
TargetWidthOpt = typer.Option(
    None, "--target-width", help=("Stop once the measured interval's high/low is this tight (1.02).")
)
TimingBudgetOpt = typer.Option(
    None,
    "--timing-budget",
    metavar="S",
    help=("Seconds the interleaved rounds may take (120; the minimum rounds always run)."),
)
TimerOpt = typer.Option(
    None,
    "--timer",
    help=("How a block of steps is timed: cuda-events (GPU default), wall-clock (CPU default), host-sync."),
)
SpeedupsOpt = typer.Option(
    None,
    "--speedups",
    metavar="VERIFY.json",
    help=("verify's result of the candidate on the extracted problem: the a-priori estimate validate reports."),
)
ProblemsOpt = typer.Option(
    None,
    "--problems",
    metavar="ENTRY.toml",
    help=("The extracted problem's entry (headroom extract writes it), for --speedups."),
)
GraphsOpt = typer.Option(
    False,
    "--graphs",
    help=("Time and profile CUDA-graph replays of each side (captured after warm-up); the output check stays eager."),
)
StepsPerRoundOpt = typer.Option(
    None, "--steps-per-round", help=("Steps per block (default: ~0.3 s of steps on a GPU, 0.2 s on a CPU).")
)
ToleranceOpt = typer.Option(
    None,
    "--tolerance",
    help=("Relative L2 error allowed per compared tensor (default by dtype: fp32 1e-3, fp16 1e-2, bf16 5e-2)."),
)
TimeoutOpt = typer.Option(
    1800.0, "--timeout", metavar="S", help="Seconds the whole run may take (a hanging candidate)."
)
AsJsonOpt = typer.Option(False, "--json", metavar="", help="One JSON document (docs/cli.md, docs/validate.md).")


def validate_cmd(
    workload: str | None = typer.Argument(None, metavar="[WORKLOAD]", help="Workload name (see `headroom workloads`)."),
    replace: list[str] | None = ReplaceOpt,
    out: Path | None = OutOpt,
    from_dir: Path | None = FromDirOpt,
    rounds: int = RoundsOpt,
    max_rounds: int | None = typer.Option(None, "--max-rounds", help="Interleaved rounds at most (40)."),
    target_width: float | None = TargetWidthOpt,
    timing_budget: float | None = TimingBudgetOpt,
    timer: str | None = TimerOpt,
    speedups: Path | None = SpeedupsOpt,
    problems: Path | None = ProblemsOpt,
    graphs: bool = GraphsOpt,
    steps_per_round: int | None = StepsPerRoundOpt,
    profile_steps: int | None = typer.Option(None, "--profile-steps", help="Profiled steps per variant (3)."),
    tolerance: float | None = ToleranceOpt,
    timeout: float = TimeoutOpt,
    threads: int | None = typer.Option(None, "--threads", help="torch CPU threads in the run (CPU timing)."),
    as_json: bool = AsJsonOpt,
    mode: Mode | None = ModeOpt,
    phase: Phase | None = PhaseOpt,
    kv_cache: KVCache | None = KvOpt,
    batch: int | None = BatchOpt,
    seq: int | None = SeqOpt,
    dtype: DType | None = DtypeOpt,
    layers: int | None = LayersOpt,
    flavour: str | None = FlavourOpt,
    opt: list[str] = OptOpt,
    device: Device = DeviceOpt,
    workload_file: Path | None = WorkloadFileOpt,
    full_size: bool = FullSizeOpt,
    no_tf32: bool = NoTf32Opt,
) -> None:
    """Swap candidates into a workload: check outputs, measure the end-to-end speedup interleaved,
    profile both, and score the projections made from the base trace alone."""
    from headroom.validate.api import validate_or_recompute

    options = _options(mode, phase, kv_cache, batch, seq, dtype, layers, flavour, opt, full_size, no_tf32)
    command = "headroom " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    result, run_dir = validate_or_recompute(
        workload,
        replace or [],
        options,
        from_dir=from_dir,
        out=out,
        device=device.value,
        rounds=rounds,
        steps_per_round=steps_per_round,
        profile_steps=profile_steps,
        gate=tolerance,
        timeout=timeout,
        workload_file=workload_file,
        command=command,
        threads=threads,
        max_rounds=max_rounds,
        target_width=target_width,
        timing_budget=timing_budget,
        timer=timer,
        speedups=speedups,
        problems=problems,
        graphs=graphs,
    )
    for w in result.detail.projection_warnings:
        warn(f"{run_dir}: projection: {w}")
    if as_json:
        emit_json("validate", plain(result), version=2)  # 2: the estimate is the a-priori one, with its level
        return
    print(render_text(result))
    print(f"  run        {run_dir}")


def _x(v) -> str:
    return f"{v:.4f}x" if isinstance(v, (int, float)) else "-"


def _pct(v) -> str:
    return f"{100 * v:+.1f}%" if isinstance(v, (int, float)) else "-"


def render_text(r: ValidateResult) -> str:
    m, p, pr, e, b = r.measured, r.part, r.projected, r.error, r.baseline
    reps = ", ".join(f"{x.module} ({x.instances}) -> {Path(x.candidate).name}" for x in r.replacements)
    lp = p.launches_per_call
    cpu = r.detail.trace_mode == "cpu-ops"
    idle = "a CPU-only trace" if cpu else f"GPU idle {100 * b.idle_fraction:.1f}% in the trace"
    ci = f"{100 * m.coverage:.1f}% CI [{_x(m.ci[0])}, {_x(m.ci[1])}]" if m.coverage else "no interval"
    sm = m.step_median_ms
    est = (
        f"  estimate   {_x(pr.estimate)}  {100 * pr.level:g}% interval [{_x(pr.low)}, {_x(pr.high)}] "
        f"(error {_pct(e.estimate)}; a-priori: {pr.source})"
        if pr.estimate is not None and pr.level
        else "  estimate   - (no a-priori estimate: give --speedups VERIFY.json --problems ENTRY.toml)"
    )
    lines = [
        f"{r.workload}: {reps}",
        f"  baseline   {b.step_ms:.3f} ms/step, {idle}" + (" (launch-bound)" if b.launch_bound else ""),
        # The speedup is the median of the rounds' paired ratios, not the ratio of the medians printed after it.
        f"  measured   {_x(m.speedup)}  {ci}  (median of {m.rounds} interleaved rounds' ratios, stopped: {m.stop}; "
        f"block medians {m.base_ms:.3f} -> {m.variant_ms:.3f} ms, step medians "
        f"{sm[0]:.3f} -> {sm[1]:.3f} ms)"
        if sm[0] is not None and sm[1] is not None
        else "",
        est,
        f"  part       {_x(p.speedup)}  {p.base_us:.1f} -> {p.variant_us:.1f} us/step, "
        f"launches per call {lp[0]:.3g} -> {lp[1]:.3g}"
        if lp[0] is not None and lp[1] is not None
        else "  part       -",
        # e.* is each projection's error against the measured speedup, not a gain: said so.
        f"  diagnostic from the variant trace: Amdahl {_x(pr.amdahl)} (error {_pct(e.amdahl)}), replay "
        f"{_x(pr.replay)} (error {_pct(e.replay)}), estimate {_x(pr.variant_estimate)} "
        f"(error {_pct(e.variant_estimate)})",
    ]
    return "\n".join(x for x in lines if x)


def register(app: typer.Typer) -> None:
    app.command("extract")(extract_cmd)
    app.command("validate")(validate_cmd)
