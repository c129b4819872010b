"""`headroom verify` and `headroom bench`: speedups a skeptic would accept."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from headroom.cli.engine import AddressOpt, EngineOpt, ResumeOpt, suite_runner
from headroom.errors import UserError
from headroom.jsonio import plain

DeviceOpt = typer.Option("auto", "--device", help="auto (CUDA if available), cpu, cuda or cuda:N.")
CompileOpt = typer.Option(False, "--vs-compile", help="Also time torch.compile(Model) and report speedup_compile.")
GraphsOpt = typer.Option(
    False,
    "--graphs",
    help="Check the candidate is capturable in a CUDA graph and time it with launches hidden (GPU only).",
)
RoundsOpt = typer.Option(
    None,
    "--rounds",
    "--iters",
    min=6,
    help="The fewest interleaved timing rounds (default 6); more run until the interval is 1.02x tight.",
)
ScaleOpt = typer.Option(
    "auto", "--scale", help="auto: scale a problem's shapes to fit a CPU (printed); full: as written."
)
TimeoutOpt = typer.Option(300.0, "--timeout", min=1.0, help="Seconds a candidate may work (builds not included).")
BuildTimeoutOpt = typer.Option(
    600.0,
    "--build-timeout",
    min=1.0,
    help="Seconds for building a candidate's load_inline extensions (outside --timeout).",
)
SeedOpt = typer.Option(None, "--seed", help="Secret seed (default: fresh; give one only to reproduce a run).")
ThreadsOpt = typer.Option(None, "--threads", min=1, help="CPU threads for torch in the child processes.")
KeepLogsOpt = typer.Option(None, "--logs", help="Keep the child processes' logs in this directory.")


def _options(
    device: str,
    vs_compile: bool,
    rounds: int | None,
    scale: str,
    timeout: float,
    build_timeout: float,
    seed: int | None,
    threads: int | None,
    logs: Path | None,
    graphs: bool = False,
):
    from headroom.verify import VerifyOptions

    opts = VerifyOptions(
        device=device,
        vs_compile=vs_compile,
        rounds=rounds,
        scale=scale,
        timeout=timeout,
        build_timeout=build_timeout,
        seed=seed,
        threads=threads,
        log_dir=str(logs) if logs else None,
        keep_logs=bool(logs),
        graphs=graphs,
    )
    opts.resolved_policy(opts.resolved_device())  # bad values: one line, exit 2, before any work
    return opts


def _is_source(path: Path) -> bool:
    """A file a problem or candidate directory is read for."""
    return path.suffix == ".py"


def _progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def _fmt_x(x: float | None) -> str:
    return f"{x:.3g}x" if isinstance(x, (int, float)) else "-"


def print_result(r: dict) -> None:
    """A result for people: the verdict line, every check, the flags."""
    head = f"{r['problem']} <- {Path(r['candidate']).name}: {r['verdict'].upper()}"
    if r["verdict"] == "pass":
        ci = r.get("speedup_ci")
        head += (
            f"  speedup {_fmt_x(r['speedup'])}"
            + (f" (95% CI {ci[0]:.3g}-{ci[1]:.3g}x)" if ci else "")
            + " vs the TF32 reference"
            f" ({_fmt_x(r['speedup_fp32'])} vs strict FP32"
            + (f", {_fmt_x(r['speedup_compile'])} vs torch.compile" if r.get("speedup_compile") else "")
            + f"), memory {_fmt_x(r['memory_ratio'])}"
        )
    print(head)
    for c in r["checks"]:
        print(f"  {'ok  ' if c['passed'] else 'FAIL'} {c['name']:<18} {c['detail']}")
    for f in r.get("flags", []):
        print(f"  FLAG {f['name']:<18} {f['detail']}")
    if r.get("capture") not in (None, "not checked"):
        print(f"  capture: {r['capture']}")
    if r.get("reason") and r["verdict"] in ("error", "inconclusive"):
        print(f"  reason: {r['reason']}")
    t = r.get("timing") or {}
    if t.get("candidate"):

        def ms(s: dict | None) -> str:
            return f"{s['median']:.4g} ms" if s and s.get("median") is not None else "-"

        print(
            f"  timing (harness clock, {t.get('rounds')} interleaved rounds of {t.get('iters_per_phase')} forwards): "
            f"candidate {ms(t['candidate'])}, reference TF32 {ms(t.get('reference_tf32'))}"
            + (f", strict FP32 {ms(t.get('reference_fp32'))}" if t.get("reference_fp32") else "")
            + (f", torch.compile {ms(t.get('reference_compile'))}" if t.get("reference_compile") else "")
        )
    lc = r.get("launches_per_call") or {}
    if lc.get("candidate") is not None:
        print(f"  launches per call: candidate {lc['candidate']}, reference {lc.get('reference')} ({lc.get('method')})")


def print_table(doc: dict) -> None:
    rows = doc.get("results", [])
    print(f"{'problem':<34} {'candidate':<30} {'verdict':<7} {'speedup':>8} {'vs fp32':>8} {'memory':>7}  note")
    for r in rows:
        failed = [c["name"] for c in r["checks"] if not c["passed"]]
        note = ", ".join(failed) if failed else (r.get("reason") or "")
        if r.get("flags"):
            note = (note + "; " if note else "") + "flags: " + ", ".join(f["name"] for f in r["flags"])
        print(
            f"{r['problem']:<34} {Path(r['candidate']).name:<30} {r['verdict']:<7} {_fmt_x(r['speedup']):>8} "
            f"{_fmt_x(r['speedup_fp32']):>8} {_fmt_x(r['memory_ratio']):>7}  {note[:120]}"
        )
    if doc.get("missing_candidates"):
        print(f"no candidates for: {', '.join(doc['missing_candidates'])}")
    agg = doc.get("aggregates")
    if agg:
        fast = ", ".join(f"fast_{p} {v:.0%}" for p, v in agg["fast_p"].items())
        print(
            f"{agg['problems']} problems: {agg['correct']} correct, {agg['wins']} wins ({agg['win_rate']:.0%}); "
            f"geomean {_fmt_x(agg['geomean_speedup'])}, median win {_fmt_x(agg['median_win'])}; {fast}; "
            f"peak memory {_fmt_x(agg['peak_memory_ratio'])} (max {_fmt_x(agg['peak_memory_ratio_max'])})"
        )


def verify(
    problem: Path | None = typer.Argument(
        None, help="KernelBench problem file (class Model, get_inputs, get_init_inputs)."
    ),
    candidate: Path | None = typer.Argument(None, help="Candidate file defining class ModelNew."),
    suite: Path | None = typer.Option(None, "--suite", help="Directory of problem files (verify them all)."),
    candidates: Path | None = typer.Option(
        None, "--candidates", help="With --suite: directory with <problem>.py or <problem>/*.py."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result (or the suite document) as JSON."),
    out: Path | None = typer.Option(None, "-o", "--out", help="Write the JSON result / results file here."),
    device: str = DeviceOpt,
    vs_compile: bool = CompileOpt,
    graphs: bool = GraphsOpt,
    rounds: int | None = RoundsOpt,
    scale: str = ScaleOpt,
    timeout: float = TimeoutOpt,
    build_timeout: float = BuildTimeoutOpt,
    seed: int | None = SeedOpt,
    threads: int | None = ThreadsOpt,
    logs: Path | None = KeepLogsOpt,
    engine: str = EngineOpt,
    address: str | None = AddressOpt,
    resume: bool = ResumeOpt,
) -> None:
    """Is a candidate kernel correct, and how much faster than a realistic (TF32) baseline? Exit 1 unless pass."""
    from headroom.files import check_output_file, check_output_not_input
    from headroom.jsonio import write_json
    from headroom.verify import dumps, verify_candidate, verify_suite

    if out is not None:
        # Before minutes of verification, not after; never over a source file it reads.
        check_output_not_input(out, [problem, candidate, suite, candidates], reads=_is_source)
        check_output_file(out)
    opts = _options(device, vs_compile, rounds, scale, timeout, build_timeout, seed, threads, logs, graphs)
    if suite is not None or candidates is not None:
        if suite is None or candidates is None:
            raise UserError("--suite and --candidates go together (a directory of problems and one of candidates)")
        if problem is not None or candidate is not None:
            raise UserError("give either PROBLEM CANDIDATE or --suite DIR --candidates DIR, not both")
        from headroom.verify.suite import problems_in

        if suite.is_dir() and not problems_in(suite):  # used to print an empty table and exit 0
            raise UserError(f"{suite}: no problem files (*.py defining Model, get_inputs, get_init_inputs)")
        _show_results(
            verify_suite(
                suite,
                candidates,
                opts,
                out=out,
                progress=_progress,
                run_pairs=suite_runner(engine, address, out, resume),
            ),
            as_json,
            out,
        )
        return
    if engine != "local" or address is not None:
        raise UserError("--engine: verify spreads the candidates of a --suite; one candidate runs here")
    if problem is None or candidate is None:
        raise UserError("usage: headroom verify PROBLEM.py CANDIDATE.py (or --suite DIR --candidates DIR)")
    result = plain(verify_candidate(problem, candidate, opts, progress=_progress))
    # The result is shown before it is written: a write that fails (a full disk) loses nothing.
    if as_json:
        print(dumps(result))
    else:
        print_result(result)
    if out is not None:
        write_json(out, result)
    if result["verdict"] != "pass":
        raise typer.Exit(code=1)


bench_app = typer.Typer(no_args_is_help=True, help="DLRM-Bench: 12 recommender kernel problems in KernelBench format.")


@bench_app.command("list")
def bench_list(as_json: bool = typer.Option(False, "--json", help="As a JSON list.")) -> None:
    """The 12 problems, their shapes and what each stands for in a DLRM trace."""
    from headroom.jsonio import plain
    from headroom.suites import dlrm

    if as_json:
        print(json.dumps(plain([dlrm.listed(p) for p in dlrm.PROBLEMS]), indent=2))
        return
    for p in dlrm.PROBLEMS:
        print(f"{p.name:<30} {p.summary}")
        print(f"{'':<30}   shapes:     {p.shapes}")
        print(f"{'':<30}   stands for: {p.stands_for}")


@bench_app.command("run")
def bench_run(
    names: list[str] | None = typer.Argument(None, help="Problems to run (names or numbers; default all 12)."),
    candidates: Path | None = typer.Option(
        None,
        "--candidates",
        help="Directory with <problem>.py or <problem>/*.py (default: the shipped honest candidates).",
    ),
    scale: str | None = typer.Option(
        None, "--scale", help="full (H200-size shapes) or cpu (small); default: cpu on a CPU, full on a GPU."
    ),
    out: Path | None = typer.Option(
        None, "-o", "--out", help="Write the results file (for headroom project --speedups)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results document as JSON."),
    device: str = DeviceOpt,
    vs_compile: bool = CompileOpt,
    graphs: bool = GraphsOpt,
    rounds: int | None = RoundsOpt,
    timeout: float = TimeoutOpt,
    build_timeout: float = BuildTimeoutOpt,
    seed: int | None = SeedOpt,
    threads: int | None = ThreadsOpt,
    logs: Path | None = KeepLogsOpt,
    engine: str = EngineOpt,
    address: str | None = AddressOpt,
    resume: bool = ResumeOpt,
) -> None:
    """Verify candidates against DLRM-Bench and write one results file."""
    from headroom.files import check_output_file, check_output_not_input
    from headroom.suites import dlrm

    if out is not None:
        check_output_not_input(out, [candidates], reads=_is_source)
        check_output_file(out)
    opts = _options(device, vs_compile, rounds, "auto", timeout, build_timeout, seed, threads, logs, graphs)
    _show_results(
        dlrm.run(
            names or None,
            candidates,
            opts,
            scale=scale,
            out=out,
            progress=_progress,
            run_pairs=suite_runner(engine, address, out, resume),
        ),
        as_json,
        out,
    )


def _show_results(doc: dict, as_json: bool, out: Path | None) -> None:
    """A suite's results document: as JSON, or as a table (and where the file went)."""
    from headroom.verify import dumps

    if as_json:
        print(dumps(doc))
    else:
        print_table(doc)
        if out:
            print(f"results -> {out}")


def register(app: typer.Typer) -> None:
    app.command()(verify)
    app.add_typer(bench_app, name="bench")
