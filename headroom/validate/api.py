"""The `validate` entry point: checks what it can without running anything, then runs the worker
(`headroom.validate.worker`) in its own process group with a time limit, and moves the run's
directory into place only when the run succeeded (nothing half-written otherwise)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.files import check_output_dir, check_replaceable_dir
from headroom.profile.workload import Options
from headroom.validate.result import RESULT_FILE, ValidateResult, recompute
from headroom.validate.run import Request
from headroom.validate.timing import MIN_ROUNDS

DEFAULT_TIMEOUT_S = 1800.0


def check_candidate_file(path: str | Path) -> Path:
    """A readable .py file that defines `class ModelNew` (read with ast; nothing runs)."""
    from headroom.verify.problem import check_file, defined_names

    p = check_file(path, "candidate")
    if "ModelNew" not in defined_names(p):
        raise UserError(f"{p}: defines no class ModelNew (a KernelBench candidate's class)")
    return p


def parse_replace(items: Sequence[str]) -> list[tuple[str, str]]:
    """`CLASS=CANDIDATE.py` items (the class may be dotted; the candidate is a path)."""
    out = []
    for item in items:
        cls, sep, cand = item.partition("=")
        if not sep or not cls.strip() or not cand.strip():
            raise UserError(f"--replace {item!r}: expected CLASS=CANDIDATE.py, e.g. LlamaRMSNorm=my_rmsnorm.py")
        out.append((cls.strip(), cand.strip()))
    if not out:
        raise UserError("give at least one --replace CLASS=CANDIDATE.py")
    return out


def _stream(pipe: Any, sink: Callable[[str], None], last: list[str]) -> None:
    from headroom.profile.progress import NOISE

    for raw in iter(pipe.readline, ""):
        line = raw.rstrip("\n")
        if NOISE.match(line):  # the profiler's C++ lines on every run (USDT: ... profiler_start)
            continue
        if line.startswith("headroom validate: ") and not line.startswith("headroom validate:  "):
            last[0] = line[len("headroom validate: ") :].split(":")[0].strip()  # a stage line, not a note
        sink(line)
    pipe.close()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _place(tmp: Path, final: Path) -> None:
    """Move the finished run directory to `final`, replacing an earlier run there."""
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def default_run_dir(workload: str, reps: Sequence[tuple[str, str]]) -> Path:
    """Where a run goes when no --out is given: out/validate/<workload>__<CLASS>[+<CLASS>...]."""
    from headroom.extract.result import safe_name
    from headroom.profile.workload import file_stem

    return Path("out/validate") / f"{file_stem(workload)}__{'+'.join(safe_name(c) for c, _ in reps)}"


def validate_or_recompute(
    workload: str | None,
    replace: Sequence[str] | Sequence[tuple[str, str]] = (),
    options: Options | None = None,
    *,
    from_dir: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    **run: Any,
) -> tuple[ValidateResult, Path]:
    """`headroom validate`: a run of `workload` with the `replace`d modules (`CLASS=CANDIDATE.py` texts or
    pairs) written to `out` (default `default_run_dir`), `run` the rest of `validate`'s keywords; or, with
    `from_dir`, the result of that saved run recomputed (nothing runs). The result and the run's directory."""
    if from_dir is not None:
        if workload or replace:
            raise UserError("--from recomputes a saved run: give no WORKLOAD or --replace with it")
        return recompute(Path(from_dir)), Path(from_dir)
    if not workload:
        raise UserError("give a WORKLOAD (see `headroom workloads`) or --from DIR")
    if not replace:
        raise UserError("give at least one --replace CLASS=CANDIDATE.py")
    reps = (
        parse_replace([str(r) for r in replace])
        if isinstance(replace[0], str)
        else [(str(r[0]), str(r[1])) for r in replace]
    )
    run_dir = Path(out) if out is not None else default_run_dir(workload, reps)
    return validate(workload, reps, options, out=run_dir, **run), run_dir


def _check_timing(
    rounds: int, max_rounds: int | None, target_width: float | None, budget: float | None, timer: str | None
) -> None:
    from headroom.measure import TIMERS

    if max_rounds is not None and max_rounds < rounds:
        raise UserError(f"--max-rounds must be at least --rounds ({rounds})")
    if target_width is not None and not target_width > 1:
        raise UserError("--target-width must be > 1 (the interval's high / low)")
    if budget is not None and not budget > 0:
        raise UserError("--timing-budget must be > 0 seconds")
    if timer is not None and timer not in TIMERS:
        raise UserError(f"--timer {timer}: unknown; known: {', '.join(sorted(TIMERS))}")


def _check_apriori(speedups: str | os.PathLike | None, problems: str | os.PathLike | None) -> None:
    for flag, f in (("--speedups", speedups), ("--problems", problems)):
        if f is not None and not Path(f).is_file():
            raise UserError(f"{flag} {f}: no such file")
    if problems is not None and speedups is None:
        raise UserError("--problems needs --speedups (verify's result of the candidate on that problem)")
    if speedups is not None:
        from headroom.projection.problems import load_problems
        from headroom.projection.speedups import load_speedup_file

        load_speedup_file(speedups)  # a bad file fails now, not after the run
        if problems is not None:
            load_problems(problems)


def _failure(rc: int, tmp: Path, stage: str, elapsed: float) -> UserError:
    """What a worker that wrote no result says: its own error, the signal that killed it, or its status."""
    # Imported here, not with the package: `python -m headroom.validate.worker` warns (a RuntimeWarning on
    # every run) when the package it belongs to imported it first.
    from headroom.validate.worker import ERROR_FILE

    if rc == 2 and (tmp / ERROR_FILE).is_file():
        return UserError((tmp / ERROR_FILE).read_text().strip())
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
        return UserError(
            f"validate: the run died with {name} during {stage} after {elapsed:.0f} s "
            f"(a crashing candidate?); nothing written"
        )
    return UserError(f"validate: the run exited with status {rc} during {stage}; nothing written")


def _replacements(replace: Sequence[tuple[str, str]] | Sequence[str]) -> list[tuple[str, str]]:
    """(CLASS, candidate file) pairs from `CLASS=CANDIDATE.py` items or pairs; at least one, each file checked."""
    reps: list[tuple[str, str]]
    if replace and isinstance(replace[0], str):
        reps = parse_replace([str(r) for r in replace])
    else:
        reps = [(r[0], r[1]) for r in replace]
    if not reps:
        raise UserError("give at least one --replace CLASS=CANDIDATE.py")
    return [(c, str(check_candidate_file(p))) for c, p in reps]


def _check_counts(
    steps_per_round: int | None, profile_steps: int | None, gate: float | None, timeout: float, threads: int | None
) -> None:
    """The step counts, the tolerance, the timeout and the thread count: each positive where given."""
    if steps_per_round is not None and steps_per_round < 1:
        raise UserError("--steps-per-round must be at least 1")
    if profile_steps is not None and profile_steps < 1:
        raise UserError("--profile-steps must be at least 1")
    if gate is not None and not gate > 0:
        raise UserError("--tolerance must be > 0")
    if not timeout > 0:
        raise UserError("--timeout must be > 0")
    if threads is not None and threads < 1:
        raise UserError("--threads must be at least 1")


def validate(
    workload: str,
    replace: Sequence[tuple[str, str]] | Sequence[str],
    options: Options | None = None,
    *,
    device: str | None = "auto",
    out: str | os.PathLike = "out/validate",
    rounds: int = MIN_ROUNDS,
    steps_per_round: int | None = None,
    profile_steps: int | None = None,
    gate: float | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    workload_file: str | os.PathLike | None = None,
    command: str = "",
    threads: int | None = None,
    max_rounds: int | None = None,
    target_width: float | None = None,
    timing_budget: float | None = None,
    timer: str | None = None,
    speedups: str | os.PathLike | None = None,
    problems: str | os.PathLike | None = None,
    graphs: bool = False,
    log: Callable[[str], None] | None = None,
) -> ValidateResult:
    """Run a validation; return the result object (docs/validate.md). `out` is the run's directory."""
    reps = _replacements(replace)
    if rounds < MIN_ROUNDS:
        raise UserError(f"--rounds must be at least {MIN_ROUNDS} (interleaved rounds give the interval)")
    _check_timing(rounds, max_rounds, target_width, timing_budget, timer)
    _check_apriori(speedups, problems)
    if graphs and device == "cpu":
        raise UserError("--graphs needs a CUDA device (it captures each side as a CUDA graph)")
    _check_counts(steps_per_round, profile_steps, gate, timeout, threads)
    if workload_file is not None and not Path(workload_file).is_file():
        raise UserError(f"{workload_file}: no such workload file")
    options = _checked_options(workload, options, workload_file, graphs, device)

    final = Path(out)
    tmp = _temporary_run_dir(final, [p for _, p in reps] + [workload_file, speedups, problems])
    req = Request(
        workload=workload,
        replace=reps,
        options=dict(options.__dict__),
        out=str(tmp),
        device=device,
        rounds=rounds,
        steps_per_round=steps_per_round,
        profile_steps=profile_steps,
        gate=gate,
        workload_file=str(workload_file) if workload_file else None,
        command=command,
        threads=threads,
        max_rounds=max_rounds,
        target_width=target_width,
        budget_s=timing_budget,
        timer=timer,
        speedups=str(speedups) if speedups else None,
        problems=str(problems) if problems else None,
        graphs=graphs,
    )
    req_path = tmp / "request.json"
    req_path.write_text(req.to_json())
    sink = log or (lambda s: print(s, file=sys.stderr, flush=True))
    try:
        rc, stage, elapsed = _run_worker(req_path, timeout, sink)
        if rc == 0 and (tmp / RESULT_FILE).is_file():
            result = ValidateResult.from_dict(json.loads((tmp / RESULT_FILE).read_text()))
            req_path.unlink()
            _place(tmp, final)
            return result
        raise _failure(rc, tmp, stage, elapsed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _temporary_run_dir(final: Path, inputs: list[Any]) -> Path:
    """The folder the run writes into, empty, beside `final` (which it replaces once the run succeeded). The run's
    folder is replaced whole: never one that holds a candidate or the workload file (`inputs`), nor a folder that
    is not an earlier run."""
    if final.exists() and not final.is_dir():
        raise UserError(f"--out {final}: exists and is not a directory")
    check_replaceable_dir(final, inputs, own=(RESULT_FILE, "run.json"))
    check_output_dir(final.parent)  # a read-only place fails now, not after the run
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def _checked_options(
    workload: str, options: Options | None, workload_file: str | os.PathLike | None, graphs: bool, device: str | None
) -> Options:
    """Fail fast on what needs no model: the workload name and its options (with --graphs, the step on static
    buffers, a decode step at a fixed position, as profile --graphs builds it)."""
    from headroom.profile.registry import get_workload, load_workload_file

    if workload_file is not None:
        load_workload_file(workload_file)
    spec = get_workload(workload)
    options = options or Options()
    if graphs:
        options = dataclasses.replace(options, graphs=True)
    spec.resolve(options, "cuda" if device not in ("cpu",) else "cpu")
    return options


def _run_worker(req_path: Path, timeout: float, sink: Callable[[str], None]) -> tuple[int, str, float]:
    """The worker process on the request, in its own session, its output streamed to `sink`, killed with its
    group at `timeout`: its exit status, the stage it last reported, and how long it ran."""
    last = ["start-up"]
    env = dict(os.environ)  # the worker imports this very headroom (a checkout run without installing too)
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "headroom.validate.worker", str(req_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )
    reader = threading.Thread(target=_stream, args=(proc.stdout, sink, last), daemon=True)
    reader.start()
    t0 = time.monotonic()
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        reader.join(timeout=5)
        raise UserError(
            f"validate: no result within --timeout {timeout:g} s (stuck in {last[0]}: a candidate "
            f"that hangs?); nothing written"
        ) from None
    except KeyboardInterrupt:
        _kill_group(proc)
        raise
    reader.join(timeout=5)
    return rc, last[0], time.monotonic() - t0
