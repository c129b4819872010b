"""`headroom profile WORKLOAD` and `headroom workloads`."""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Iterator, List, Optional

import typer
from rich.console import Console

from headroom.errors import UserError
from headroom.extras import require
from headroom.jsonio import dumps



class RichProgress:
    """Stage display on stderr: a spinner while a stage runs, a line with its time when done."""

    def __init__(self, console: Console):
        self.console = console

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        t0 = time.perf_counter()
        label = f"[bold]{name}[/bold] {detail}".rstrip()
        with self.console.status(label, spinner="dots"):
            yield
        self.console.print(f"[green]\u2713[/green] {name:<10} {time.perf_counter() - t0:7.1f} s  {detail}",
                           highlight=False)

    def note(self, message: str) -> None:
        self.console.print(f"[yellow]notice:[/yellow] {message}", highlight=False)


def _parse_opts(opts: List[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for o in opts:
        if "=" not in o:
            raise UserError(f"--opt {o}: expected KEY=VALUE")
        k, v = o.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def profile(
    workload: str = typer.Argument(..., help="Workload name (see `headroom workloads`)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="train or infer (default: the workload's)."),
    phase: Optional[str] = typer.Option(None, "--phase", help="prefill or decode (decoder LMs)."),
    kv_cache: Optional[str] = typer.Option(None, "--kv-cache", help="static or dynamic KV cache (decode)."),
    batch: Optional[int] = typer.Option(None, "--batch", help="Batch size."),
    seq: Optional[int] = typer.Option(None, "--seq", help="Sequence length (tokens)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="bf16, fp16 or fp32."),
    layers: Optional[int] = typer.Option(None, "--layers",
                                         help="Profile N of the identical blocks and extrapolate to all."),
    compile_: bool = typer.Option(False, "--compile", help="Run the model under torch.compile."),
    flavour: Optional[str] = typer.Option(None, "--flavour", help="Size preset (e.g. llama-7b --flavour 70b)."),
    opt: List[str] = typer.Option([], "--opt", help="Workload option KEY=VALUE (see `headroom workloads -v`)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Profiled steps (default 3 on a GPU, 1 on a CPU)."),
    warmup: Optional[int] = typer.Option(None, "--warmup", help="Warm-up steps (default 3 GPU, 1 CPU)."),
    timed_steps: Optional[int] = typer.Option(None, "--timed-steps",
                                              help="Unprofiled timed steps (default 10 GPU, 3 CPU)."),
    out: Path = typer.Option(Path("out"), "--out", help="Directory for the trace and manifest.json."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (manifest, timing, analysis)."),
    workload_file: Optional[Path] = typer.Option(None, "--workload-file",
                                                 help="Python file defining extra workloads."),
    device: str = typer.Option("auto", "--device", help="auto (CUDA when present), cuda or cpu."),
    no_tf32: bool = typer.Option(False, "--no-tf32", help="Strict fp32 matmuls (TF32 is on by default)."),
    full_size: bool = typer.Option(False, "--full-size", help="On a CPU, run the real defaults (no scaling)."),
) -> None:
    """Run a workload under torch.profiler and say where the time went."""
    require("torch", "profile", "profile")
    from headroom.profile.run import profile_workload
    from headroom.profile.workload import Options

    options = Options(mode=mode, phase=phase, kv_cache=kv_cache, batch=batch, seq=seq, dtype=dtype,
                      layers=layers, compile=compile_, flavour=flavour, tf32=not no_tf32,
                      extra=_parse_opts(opt), scale_for_cpu=not full_size)
    err = Console(stderr=True)
    if not err.is_terminal:
        err = Console(stderr=True, width=160)
    command = "headroom " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    # Library chatter on stdout must not corrupt --json.
    guard = contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()
    with guard:
        result = profile_workload(workload, options, device=device, out=out, steps=steps, warmup=warmup,
                                  timed_steps=timed_steps, workload_file=workload_file,
                                  progress=RichProgress(err), command=command)
    if as_json:
        print(dumps(result.to_dict()))
        return
    from headroom.report.render import make_console, render_profile

    console = make_console()
    console.print()
    render_profile(result, console)


def workloads(
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Also show each default's reason, flavours, options."),
    workload_file: Optional[Path] = typer.Option(None, "--workload-file", help="Python file defining extra workloads."),
    as_json: bool = typer.Option(False, "--json", help="The registry as JSON."),
) -> None:
    """List the workloads: model, defaults, flavours."""
    from headroom.profile.registry import list_workloads, load_workload_file

    if workload_file is not None:
        load_workload_file(workload_file)
    specs = list_workloads()
    if as_json:
        print(json.dumps([{
            "name": s.name, "domain": s.domain, "description": s.description, "model": s.model,
            "modes": list(s.modes), "phases": list(s.phases), "kv_caches": list(s.kv_caches),
            "defaults": {k: {"value": d.value, "why": d.why} for k, d in s.defaults.items()},
            "flavours": s.flavours, "layers": s.num_layers("default") if s.num_layers else None,
            "options": {k: {"value": d.value, "why": d.why} for k, d in s.extras.items()},
            "source": s.source,
        } for s in specs], default=str))
        return
    from headroom.report.render import make_console, render_workloads

    render_workloads(specs, verbose, make_console())


def register(app: typer.Typer) -> None:
    app.command()(profile)
    app.command()(workloads)
