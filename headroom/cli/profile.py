"""`headroom profile WORKLOAD` and `headroom workloads`."""

from __future__ import annotations

import contextlib
import enum
import os
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from headroom.cli.output import emit_json
from headroom.errors import UserError
from headroom.extras import require
from headroom.jsonio import plain
from headroom.profile.progress import OutputCapture, Progress


class RichProgress(Progress):
    """Stage display on stderr: a spinner while a stage runs, a line with its time when done.

    While a run is on, whatever the libraries print (Kineto's C++ lines, torch.fx or tqdm warnings)
    would land inside the live display: `capturing()` routes file descriptors 1 and 2 to a temporary
    file (headroom.profile.progress.OutputCapture), and after each stage its lines are printed above
    the display, known noise left out. The display itself writes to a copy of the original stderr.
    """

    def __init__(self) -> None:
        self._stderr_fd = os.dup(2)
        stream = os.fdopen(self._stderr_fd, "w", buffering=1, closefd=False)
        self.console = Console(file=stream, stderr=False, width=None if stream.isatty() else 160)
        self._capture = OutputCapture(lambda line: self.console.print(line, markup=False, highlight=False, style="dim"))

    def capturing(self) -> AbstractContextManager[None]:
        """Route fds 1 and 2 to a temporary file while the run is on."""
        return self._capture.capturing()

    def _flush_captured(self) -> None:
        self._capture.flush()

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        t0 = time.perf_counter()
        label = f"[bold]{name}[/bold] {detail}".rstrip()
        try:
            with self.console.status(label, spinner="dots"):
                yield
        finally:
            self._flush_captured()
        self.console.print(
            f"[green]\u2713[/green] {name:<10} {time.perf_counter() - t0:7.1f} s  {detail}", highlight=False
        )

    def note(self, message: str) -> None:
        self.console.print(f"headroom: warning: {message}", markup=False, highlight=False)


def _parse_opts(opts: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for o in opts:
        if "=" not in o:
            raise UserError(f"--opt {o}: expected KEY=VALUE")
        k, v = o.split("=", 1)
        out[k.strip()] = v.strip()
    return out


# The choices of an option, as str enums (--help and shell completion list them), each member written out:
# the type checker reads an enum made by a call only from literal members.
Mode = enum.Enum("Mode", {"train": "train", "infer": "infer"}, type=str)
Phase = enum.Enum("Phase", {"prefill": "prefill", "decode": "decode"}, type=str)
KVCache = enum.Enum("KVCache", {"static": "static", "dynamic": "dynamic"}, type=str)
DType = enum.Enum("DType", {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}, type=str)
Device = enum.Enum("Device", {"auto": "auto", "cuda": "cuda", "cpu": "cpu"}, type=str)
Parallel = enum.Enum("Parallel", {"ddp": "ddp", "fsdp": "fsdp", "torchrec": "torchrec"}, type=str)


WorkloadArg = typer.Argument(
    ...,
    metavar="WORKLOAD",
    help="Workload name (see `headroom workloads`).",
    autocompletion=lambda: _workload_names(),
)
LayersOpt = typer.Option(None, "--layers", min=1, help="Profile N of the identical blocks and extrapolate to all.")
CompileModeOpt = typer.Option(
    None,
    "--compile-mode",
    metavar="MODE",
    help=(
        "torch.compile's mode (implies --compile): default, reduce-overhead (CUDA graphs), max-autotune, "
        "max-autotune-no-cudagraphs."
    ),
)
GraphsOpt = typer.Option(
    False,
    "--graphs",
    metavar="",
    help=(
        "Capture the step once as a CUDA graph after warm-up and replay it, as serving engines run decode; "
        "the capture is profiled into OUT/captures/ so replayed kernels keep their ops and modules "
        "(docs/graphs.md)."
    ),
)
FlavourOpt = typer.Option(None, "--flavour", metavar="NAME", help="Size preset (e.g. llama-7b --flavour 70b).")
OptOpt = typer.Option([], "--opt", metavar="KEY=VALUE", help="Workload option (see `headroom workloads -v`).")
TimedStepsOpt = typer.Option(None, "--timed-steps", min=1, help="Unprofiled timed steps (default 10 GPU, 3 CPU).")
WorkloadFileOpt = typer.Option(None, "--workload-file", metavar="FILE", help="Python file defining extra workloads.")
FullSizeOpt = typer.Option(False, "--full-size", metavar="", help="On a CPU, run the real defaults (no scaling).")
NoModuleRangesOpt = typer.Option(
    False,
    "--no-module-ranges",
    metavar="",
    help=("Do not record a range per nn.Module call (recorded by default, for `targets --by module`)."),
)
NprocOpt = typer.Option(
    1,
    "--nproc",
    metavar="N",
    help=(
        "Ranks: one process per GPU (per CPU slot with gloo), launched by torch's elastic launcher; "
        "traces in OUT/<name>/rank-K.json.gz."
    ),
)
ParallelOpt = typer.Option(
    None,
    "--parallel",
    case_sensitive=False,
    help=(
        "With --nproc: ddp or fsdp (FSDP2) for transformer and vision training; recommenders shard "
        "their tables with torchrec (default: the workload's, see `headroom workloads -v`)."
    ),
)


def profile(
    workload: str = WorkloadArg,
    mode: Mode | None = typer.Option(None, "--mode", case_sensitive=False, help="Default: the workload's."),
    phase: Phase | None = typer.Option(None, "--phase", case_sensitive=False, help="Decoder LMs."),
    kv_cache: KVCache | None = typer.Option(None, "--kv-cache", case_sensitive=False, help="KV cache (decode)."),
    batch: int | None = typer.Option(None, "--batch", min=1, help="Batch size."),
    seq: int | None = typer.Option(None, "--seq", min=1, help="Sequence length (tokens)."),
    dtype: DType | None = typer.Option(None, "--dtype", case_sensitive=False, help="Default: the workload's."),
    layers: int | None = LayersOpt,
    compile_: bool = typer.Option(False, "--compile", metavar="", help="Run the model under torch.compile."),
    compile_mode: str | None = CompileModeOpt,
    graphs: bool = GraphsOpt,
    flavour: str | None = FlavourOpt,
    opt: list[str] = OptOpt,
    steps: int | None = typer.Option(None, "--steps", min=1, help="Profiled steps (default 3 on a GPU, 1 on a CPU)."),
    warmup: int | None = typer.Option(None, "--warmup", min=0, help="Warm-up steps (default 3 GPU, 1 CPU)."),
    timed_steps: int | None = TimedStepsOpt,
    out: Path = typer.Option(Path("out"), "--out", metavar="DIR", help="Directory for the trace and manifest.json."),
    as_json: bool = typer.Option(False, "--json", metavar="", help="One JSON document (docs/cli.md)."),
    workload_file: Path | None = WorkloadFileOpt,
    device: Device = typer.Option("auto", "--device", case_sensitive=False, help="auto: CUDA when present."),
    no_tf32: bool = typer.Option(False, "--no-tf32", metavar="", help="Strict fp32 matmuls (TF32 is on by default)."),
    full_size: bool = FullSizeOpt,
    no_module_ranges: bool = NoModuleRangesOpt,
    nproc: int = NprocOpt,
    parallel: Parallel | None = ParallelOpt,
) -> None:
    """Run a workload under torch.profiler and say where the time went."""
    require("torch", "profile", "profile")
    from headroom.profile.workload import Options

    value = lambda e: e.value if e is not None else None  # noqa: E731
    options = Options(
        mode=value(mode),
        phase=value(phase),
        kv_cache=value(kv_cache),
        batch=batch,
        seq=seq,
        dtype=value(dtype),
        layers=layers,
        compile=compile_,
        compile_mode=compile_mode,
        graphs=graphs,
        flavour=flavour,
        tf32=not no_tf32,
        extra=_parse_opts(opt),
        scale_for_cpu=not full_size,
        module_ranges=not no_module_ranges,
        parallel=value(parallel),
    )
    command = "headroom " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    run: dict[str, Any] = dict(device=device.value, out=out, steps=steps, warmup=warmup, timed_steps=timed_steps)
    run.update(workload_file=workload_file, progress=RichProgress(), command=command)
    if nproc != 1 or parallel:
        _profile_ranks(workload, options, nproc, as_json, run)
    else:
        _profile_one(workload, options, as_json, run)


def _profile_one(workload: str, options: Any, as_json: bool, run: dict[str, Any]) -> None:
    """One process: the run, then its result on stdout (`run`: profile_workload's keyword arguments)."""
    from headroom.profile.run import profile_workload

    # Library chatter (Python or C++, stdout or stderr) never reaches stdout: --json stays parseable.
    with run["progress"].capturing():
        result = profile_workload(workload, options, **run)
    if as_json:
        emit_json("profile", plain(result))
        return
    from headroom.report.render import make_console, render_profile

    console = make_console()
    console.print()
    render_profile(result, console)


def _profile_ranks(workload: str, options: Any, nproc: int, as_json: bool, run: dict[str, Any]) -> None:
    """A --nproc run: the ranks launched together, then their tables on stdout (`run`: profile_ranks' keyword
    arguments)."""
    from headroom.profile.launch import profile_ranks

    if nproc < 1:
        raise UserError("--nproc must be at least 1")
    if nproc == 1:
        raise UserError(f"--parallel {options.parallel} needs --nproc 2 or more")
    # The ranks print their own stage lines on stderr; the parent's library chatter stays off stdout.
    with contextlib.redirect_stdout(sys.stderr):
        result = profile_ranks(workload, options, nproc=nproc, **run)
    if as_json:
        emit_json("profile.ranks", plain(result))
        return
    from headroom.report.rank_tables import render_rank_set
    from headroom.report.render import make_console

    console = make_console()
    console.print()
    render_rank_set(result.ranks, console)
    for p in result.traces:
        console.print(f"trace: {p}", highlight=False)
    console.print(f"manifest: {result.manifest_path}", highlight=False)


def _workload_names() -> list[str]:
    try:
        from headroom.profile.registry import list_workloads

        return [s.name for s in list_workloads()]
    except Exception:  # completion must never fail loudly
        return []


def workloads(
    verbose: bool = typer.Option(
        False, "-v", "--verbose", metavar="", help="Also show each default's reason, flavours, options."
    ),
    workload_file: Path | None = typer.Option(
        None, "--workload-file", metavar="FILE", help="Python file defining extra workloads."
    ),
    as_json: bool = typer.Option(False, "--json", metavar="", help="One JSON document (docs/cli.md)."),
) -> None:
    """List the workloads: model, defaults, flavours."""
    from headroom.profile.registry import list_workloads, load_workload_file

    if workload_file is not None:
        load_workload_file(workload_file)
    specs = list_workloads()
    if as_json:
        emit_json(
            "workloads",
            {
                "workloads": [
                    {
                        "name": s.name,
                        "domain": s.domain,
                        "description": s.description,
                        "model": s.model,
                        "modes": list(s.modes),
                        "phases": list(s.phases),
                        "kv_caches": list(s.kv_caches),
                        "defaults": {k: {"value": d.value, "why": d.why} for k, d in s.defaults.items()},
                        "flavours": s.flavours,
                        "layers": s.num_layers("default") if s.num_layers else None,
                        "options": {k: {"value": d.value, "why": d.why} for k, d in s.extras.items()},
                        "parallel": list(s.parallel),
                        "source": s.source,
                    }
                    for s in specs
                ]
            },
        )
        return
    from headroom.report.render import make_console, render_workloads

    render_workloads(specs, verbose, make_console())


def register(app: typer.Typer) -> None:
    app.command()(profile)
    app.command()(workloads)
