"""`headroom verify` and `headroom bench`: speedups a skeptic would accept."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from headroom.errors import UserError

DeviceOpt = typer.Option("auto", "--device", help="auto (CUDA if available), cpu, cuda or cuda:N.")
CompileOpt = typer.Option(False, "--vs-compile", help="Also time torch.compile(Model) and report speedup_compile.")
ItersOpt = typer.Option(None, "--iters", min=1, help="Timed iterations (default 20 on a GPU, 5 on a CPU).")
WarmupOpt = typer.Option(None, "--warmup", min=0, help="Warm-up iterations (default 3 on a GPU, 1 on a CPU).")
TimeoutOpt = typer.Option(300.0, "--timeout", min=1.0, help="Seconds a candidate may run, start to finish.")
SeedOpt = typer.Option(None, "--seed", help="Secret seed (default: fresh; give one only to reproduce a run).")
ThreadsOpt = typer.Option(None, "--threads", min=1, help="CPU threads for torch in the child processes.")
KeepLogsOpt = typer.Option(None, "--logs", help="Keep the child processes' logs in this directory.")


def _options(device: str, vs_compile: bool, iters: Optional[int], warmup: Optional[int], timeout: float,
             seed: Optional[int], threads: Optional[int], logs: Optional[Path]):
    from headroom.verify import VerifyOptions

    return VerifyOptions(device=device, vs_compile=vs_compile, iters=iters, warmup=warmup, timeout=timeout,
                         seed=seed, threads=threads, log_dir=str(logs) if logs else None, keep_logs=bool(logs))


def _progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def _fmt_x(x: Optional[float]) -> str:
    return f"{x:.3g}x" if isinstance(x, (int, float)) else "-"


def print_result(r: dict) -> None:
    """A result for people: the verdict line, every check, the flags."""
    head = f"{r['problem']} <- {Path(r['candidate']).name}: {r['verdict'].upper()}"
    if r["verdict"] == "pass":
        head += (f"  speedup {_fmt_x(r['speedup'])} vs the TF32 reference"
                 f" ({_fmt_x(r['speedup_fp32'])} vs strict FP32"
                 + (f", {_fmt_x(r['speedup_compile'])} vs torch.compile" if r.get("speedup_compile") else "")
                 + f"), memory {_fmt_x(r['memory_ratio'])}")
    print(head)
    for c in r["checks"]:
        print(f"  {'ok  ' if c['passed'] else 'FAIL'} {c['name']:<18} {c['detail']}")
    for f in r.get("flags", []):
        print(f"  FLAG {f['name']:<18} {f['detail']}")
    if r["verdict"] != "pass" and r.get("reason") and r["verdict"] == "error":
        print(f"  reason: {r['reason']}")
    t = r.get("timing") or {}
    if t.get("candidate"):
        def ms(s: Optional[dict]) -> str:
            return f"{s['median']:.4g} ms" if s and s.get("median") is not None else "-"
        print(f"  timing ({t.get('method')}, median of {t['candidate'].get('n')}): candidate {ms(t['candidate'])}, "
              f"reference TF32 {ms(t.get('reference_tf32'))}, strict FP32 {ms(t.get('reference_fp32'))}"
              + (f", torch.compile {ms(t.get('reference_compile'))}" if t.get("reference_compile") else ""))


def print_table(doc: dict) -> None:
    rows = doc.get("results", [])
    print(f"{'problem':<34} {'candidate':<30} {'verdict':<7} {'speedup':>8} {'vs fp32':>8} {'memory':>7}  note")
    for r in rows:
        failed = [c["name"] for c in r["checks"] if not c["passed"]]
        note = ", ".join(failed) if failed else (r.get("reason") or "")
        if r.get("flags"):
            note = (note + "; " if note else "") + "flags: " + ", ".join(f["name"] for f in r["flags"])
        print(f"{r['problem']:<34} {Path(r['candidate']).name:<30} {r['verdict']:<7} {_fmt_x(r['speedup']):>8} "
              f"{_fmt_x(r['speedup_fp32']):>8} {_fmt_x(r['memory_ratio']):>7}  {note[:120]}")
    if doc.get("missing_candidates"):
        print(f"no candidates for: {', '.join(doc['missing_candidates'])}")


def verify(
    problem: Optional[Path] = typer.Argument(None, help="KernelBench problem file (class Model, get_inputs, get_init_inputs)."),
    candidate: Optional[Path] = typer.Argument(None, help="Candidate file defining class ModelNew."),
    suite: Optional[Path] = typer.Option(None, "--suite", help="Directory of problem files (verify them all)."),
    candidates: Optional[Path] = typer.Option(None, "--candidates",
                                              help="With --suite: directory with <problem>.py or <problem>/*.py."),
    as_json: bool = typer.Option(False, "--json", help="Print the result (or the suite document) as JSON."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write the JSON result / results file here."),
    device: str = DeviceOpt,
    vs_compile: bool = CompileOpt,
    iters: Optional[int] = ItersOpt,
    warmup: Optional[int] = WarmupOpt,
    timeout: float = TimeoutOpt,
    seed: Optional[int] = SeedOpt,
    threads: Optional[int] = ThreadsOpt,
    logs: Optional[Path] = KeepLogsOpt,
) -> None:
    """Is a candidate kernel correct, and how much faster than a realistic (TF32) baseline? Exit 1 unless pass."""
    from headroom.files import check_output_file
    from headroom.jsonio import write_json
    from headroom.verify import dumps, verify_candidate, verify_suite

    if out is not None:
        check_output_file(out)   # before minutes of verification, not after
    opts = _options(device, vs_compile, iters, warmup, timeout, seed, threads, logs)
    if suite is not None or candidates is not None:
        if suite is None or candidates is None:
            raise UserError("--suite and --candidates go together (a directory of problems and one of candidates)")
        if problem is not None or candidate is not None:
            raise UserError("give either PROBLEM CANDIDATE or --suite DIR --candidates DIR, not both")
        from headroom.verify.harness import problems_in

        if suite.is_dir() and not problems_in(suite):   # used to print an empty table and exit 0
            raise UserError(f"{suite}: no problem files (*.py defining Model, get_inputs, get_init_inputs)")
        _show_results(verify_suite(suite, candidates, opts, out=out, progress=_progress), as_json, out)
        return
    if problem is None or candidate is None:
        raise UserError("usage: headroom verify PROBLEM.py CANDIDATE.py (or --suite DIR --candidates DIR)")
    result = verify_candidate(problem, candidate, opts, progress=_progress).to_dict()
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
    from headroom import bench

    if as_json:
        print(json.dumps([p.to_dict() for p in bench.PROBLEMS], indent=2))
        return
    for p in bench.PROBLEMS:
        print(f"{p.name:<30} {p.summary}")
        print(f"{'':<30}   shapes:     {p.shapes}")
        print(f"{'':<30}   stands for: {p.stands_for}")


@bench_app.command("run")
def bench_run(
    names: Optional[List[str]] = typer.Argument(None, help="Problems to run (names or numbers; default all 12)."),
    candidates: Optional[Path] = typer.Option(None, "--candidates",
                                              help="Directory with <problem>.py or <problem>/*.py "
                                                   "(default: the shipped honest candidates)."),
    scale: Optional[str] = typer.Option(None, "--scale", help="full (H200-size shapes) or cpu (small); "
                                                              "default: cpu on a CPU, full on a GPU."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write the results file (for headroom project --speedups)."),
    as_json: bool = typer.Option(False, "--json", help="Print the results document as JSON."),
    device: str = DeviceOpt,
    vs_compile: bool = CompileOpt,
    iters: Optional[int] = ItersOpt,
    warmup: Optional[int] = WarmupOpt,
    timeout: float = TimeoutOpt,
    seed: Optional[int] = SeedOpt,
    threads: Optional[int] = ThreadsOpt,
    logs: Optional[Path] = KeepLogsOpt,
) -> None:
    """Verify candidates against DLRM-Bench and write one results file."""
    from headroom import bench
    from headroom.files import check_output_file

    if out is not None:
        check_output_file(out)
    opts = _options(device, vs_compile, iters, warmup, timeout, seed, threads, logs)
    _show_results(bench.run(names or None, candidates, opts, scale=scale, out=out, progress=_progress), as_json, out)


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
