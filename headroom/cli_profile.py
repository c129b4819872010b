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
from rich.table import Table

from headroom.errors import UserError

PHASES = ("build", "warm-up", "timing", "profiling", "export", "classify")


class RichProgress:
    """Phase display on stderr: a spinner while a phase runs, a line with its time when done."""

    def __init__(self, console: Console):
        self.console = console

    @contextlib.contextmanager
    def phase(self, name: str, detail: str = "") -> Iterator[None]:
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


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_result(result, console: Console) -> None:
    """The classification, then timing, overhead, idle share, addressable fraction, extrapolation."""
    from headroom.analysis import MODE_CPU

    try:
        from headroom.report import render_analysis
    except ImportError:  # the report module is not there: a plain table
        render_analysis = None
    a = result.analysis
    cfg = result.config
    if render_analysis is not None:
        render_analysis(a, console)
    else:
        for r in a.categories.itertuples(index=False):
            console.print(f"  {r.name:<14} {r.us / 1000:10.2f} ms  {_pct(r.fraction):>6}")
    unit = "CPU op time" if a.mode == MODE_CPU else "GPU time"
    t, p = result.timed, result.profiled
    console.print()
    if t.n:
        console.print(f"[bold]step time[/bold]        {t.median_ms:,.2f} ms  (median of {t.n}, {t.method}; "
                      f"min {t.min_ms:,.2f}, max {t.max_ms:,.2f})", highlight=False)
        noisy = "; few CPU steps: indicative only" if a.mode == MODE_CPU else ""
        console.print(f"profiler overhead  {100 * result.overhead:+.1f}%  (profiled median {p.median_ms:,.2f} ms "
                      f"over {p.n} steps{noisy})", highlight=False)
    else:
        console.print(f"[bold]step time[/bold]        {p.median_ms:,.2f} ms  (profiled; no unprofiled steps timed)",
                      highlight=False)
    if a.mode == MODE_CPU:
        console.print("idle share         n/a (no GPU)")
    else:
        console.print(f"GPU idle share     {_pct(a.idle_fraction)} of the profiled wall time")
    console.print(f"[bold]addressable[/bold]      {_pct(a.addressable_fraction)} of {unit}", highlight=False)
    x = result.layers
    if x is not None and cfg.extrapolated:
        console.print()
        console.print(f"[bold]extrapolated to {x.total} of {x.total} blocks[/bold] from {x.built} "
                      f"(per-block time x{x.factor:g}; {_pct(x.block_share)} of the measured time is in blocks)")
        table = Table(show_edge=False, header_style="bold")
        table.add_column("category")
        table.add_column(f"% of {unit} ({x.total} blocks)", justify="right")
        table.add_column(f"measured ({x.built} blocks)", justify="right")
        table.add_column("addressable")
        for r in x.categories.itertuples(index=False):
            table.add_row(r.name, _pct(r.fraction), _pct(r.measured_fraction), "yes" if r.addressable else "no")
        console.print(table)
        est = f"{x.timed_step_ms_extrapolated:,.2f} ms" if x.timed_step_ms_extrapolated else \
            f"{x.step_us_extrapolated / 1000:,.2f} ms (profiled)"
        console.print(f"[bold]step time, {x.total} blocks (estimated)[/bold]  {est}", highlight=False)
        console.print(f"[bold]addressable, {x.total} blocks[/bold]  {_pct(x.addressable_fraction)} of {unit}",
                      highlight=False)
    info = result.manifest.get("info", {})
    if info.get("embedding_path"):
        console.print(f"embeddings: {info['embedding_path']}", highlight=False)
    for note in cfg.notes:
        console.print(f"[yellow]scaled for the CPU:[/yellow] {note}", highlight=False)
    console.print(f"trace: {result.trace_path}   manifest: {result.manifest_path}", highlight=False)


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
    from headroom.profile import profile_workload
    from headroom.workload import Options

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
        print(json.dumps(result.to_dict(), default=str))
        return
    from headroom.report import make_console

    console = make_console()
    console.print()
    render_result(result, console)


def workloads(
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Also show each default's reason, flavours, options."),
    workload_file: Optional[Path] = typer.Option(None, "--workload-file", help="Python file defining extra workloads."),
    as_json: bool = typer.Option(False, "--json", help="The registry as JSON."),
) -> None:
    """List the workloads: model, defaults, flavours."""
    from headroom.workload import list_workloads, load_workload_file

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
    from headroom.report import make_console

    console = make_console()
    t = Table(show_edge=False, header_style="bold")
    for col in ("workload", "domain", "mode", "batch", "seq", "dtype", "blocks", "model"):
        t.add_column(col)
    for s in specs:
        t.add_row(s.name, s.domain, s.default("mode"), str(s.default("batch")), str(s.default("seq") or "-"),
                  str(s.default("dtype")), str(s.num_layers("default")) if s.num_layers else "-", s.model)
    console.print(t)
    if not verbose:
        console.print("(-v for the reason behind each default, flavours and options)")
        return
    for s in specs:
        console.print(f"\n[bold]{s.name}[/bold]  {s.description}", highlight=False)
        for k, d in s.defaults.items():
            console.print(f"  {k:<18} {str(d.value):<10} {d.why}", highlight=False)
        console.print(f"  flavours: {', '.join(f'{k} ({v})' for k, v in s.flavours.items())}", highlight=False)
        for k, d in s.extras.items():
            console.print(f"  --opt {k}={d.value}: {d.why}", highlight=False)
        if s.cpu_scale:
            console.print("  on a CPU: " + "; ".join(f"{k} -> {v[0]} ({v[1]})" for k, v in s.cpu_scale.items()),
                          highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(profile)
    app.command()(workloads)
