"""Running things: profile a workload, extract a problem from it, verify a candidate kernel, validate a
swap end to end. Each calls what its command calls, with the command's defaults; torch is imported when
one runs, not when `headroom` is imported."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Union

from headroom.extract.result import ExtractResult
from headroom.profile.launch import RanksProfileResult, profile_ranks
from headroom.profile.run import ProfileResult, profile_workload
from headroom.profile.workload import Options as WorkloadOptions
from headroom.validate.api import DEFAULT_TIMEOUT_S, validate_or_recompute
from headroom.validate.result import ValidateResult
from headroom.validate.timing import MIN_ROUNDS
from headroom.verify.options import VerifyOptions
from headroom.verify.results import VerifyResult

PathLike = Union[str, "os.PathLike[str]"]


def profile(
    workload: str,
    options: WorkloadOptions | None = None,
    *,
    device: str = "auto",
    out: PathLike = "out",
    steps: int | None = None,
    warmup: int | None = None,
    timed_steps: int | None = None,
    workload_file: PathLike | None = None,
) -> ProfileResult | RanksProfileResult:
    """Run a registered workload under torch.profiler and classify where its time went, as `headroom profile`.

    `options`: a `WorkloadOptions` (mode, phase, batch, seq, dtype, layers, flavour, ...; None: the
    workload's defaults, scaled down on a CPU); `device`: auto (CUDA when present), cuda or cpu; `out`: the
    directory for the trace and manifest.json; `steps`/`warmup`/`timed_steps`: profiled, warm-up and
    unprofiled timed steps (None: 3/3/10 on a GPU, 1/1/3 on a CPU); `workload_file`: a Python file defining
    extra workloads. Returns a `ProfileResult` (`.trace_path`, `.analysis`, `.timed`, `.manifest`); with
    `options.nproc` above 1 (or `options.parallel`), the ranks' `RanksProfileResult`."""
    options = options or WorkloadOptions()
    if options.nproc != 1 or options.parallel:
        return profile_ranks(
            workload,
            options,
            nproc=options.nproc,
            device=device,
            out=out,
            steps=steps,
            warmup=warmup,
            timed_steps=timed_steps,
            workload_file=workload_file,
        )
    return profile_workload(
        workload,
        options,
        device=device,
        out=out,
        steps=steps,
        warmup=warmup,
        timed_steps=timed_steps,
        workload_file=workload_file,
    )


def extract(
    workload: str,
    module: str,
    options: WorkloadOptions | None = None,
    *,
    device: str = "auto",
    out: PathLike = "out/problems",
    trace: PathLike | None = None,
    window: str | None = None,
    profile: bool = True,
    workload_file: PathLike | None = None,
) -> ExtractResult:
    """Write a KernelBench problem with the real shapes of a module class (or `op:aten::NAME`) of a
    workload, and its problem -> selector entry for `project(problems=...)`, as `headroom extract`.

    `options`, `device`, `workload_file`: as `profile`; `out`: the directory for the problem and its entry;
    `trace`: measure the module's share of time in this trace (and, for an op, read its shapes there)
    instead of a one-step profile (`window`: its steps by a range name); `profile=False`: no profile (the
    share unknown). Returns an `ExtractResult` (`.problem`, `.entry`, `.selectors`, `.share`)."""
    from headroom.extract import extract as _extract

    return _extract(
        workload,
        module,
        options,
        device=device,
        out=out,
        trace=trace,
        window=window,
        profile=profile,
        workload_file=workload_file,
    )


def verify(problem: PathLike, candidate: PathLike, options: VerifyOptions | None = None) -> VerifyResult:
    """Is a candidate kernel correct, and how much faster than a realistic (TF32) baseline? As `headroom
    verify PROBLEM CANDIDATE`: the candidate (a file defining `class ModelNew`) runs in a sandboxed child
    against the problem (a KernelBench file: `Model`, `get_inputs`, `get_init_inputs`) on secret inputs,
    timed interleaved with the reference.

    `options`: a `VerifyOptions` (device, rounds, timeout, scale, seed, threads, vs_compile, graphs, ...; None:
    the command's defaults; `graphs=True` on a CPU is a UserError). Returns a `VerifyResult`: `.verdict` (pass,
    fail, inconclusive, error), `.speedup` with `.speedup_ci`, `.checks`, `.flags`, `.capture`;
    `headroom.jsonio.plain(r)` is the `--json` document."""
    from headroom.verify import verify_candidate

    options = options or VerifyOptions()
    options.resolved_policy(options.resolved_device())  # bad values: a UserError before any work
    return verify_candidate(Path(problem), Path(candidate), options)


def validate(
    workload: str | None = None,
    replace: Sequence[str] = (),
    options: WorkloadOptions | None = None,
    *,
    from_dir: PathLike | None = None,
    out: PathLike | None = None,
    device: str = "auto",
    rounds: int = MIN_ROUNDS,
    steps_per_round: int | None = None,
    profile_steps: int | None = None,
    tolerance: float | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    threads: int | None = None,
    workload_file: PathLike | None = None,
    max_rounds: int | None = None,
    target_width: float | None = None,
    timing_budget: float | None = None,
    timer: str | None = None,
    speedups: PathLike | None = None,
    problems: PathLike | None = None,
    graphs: bool = False,
) -> ValidateResult:
    """Swap candidates into a workload: check outputs, measure the end-to-end speedup interleaved, profile
    both, and score the projections made from the base trace alone, as `headroom validate`.

    `replace`: ``CLASS=CANDIDATE.py`` texts (every instance of CLASS becomes the candidate's ModelNew);
    `out`: the run's directory (default out/validate/<workload>__<CLASS>); `from_dir`: instead of a run, the
    result of a saved run recomputed from its traces (give no workload then); `rounds`: the fewest interleaved
    rounds, then more until the interval's high/low is `target_width` (default 1.02), `max_rounds` or the
    `timing_budget` seconds end; `timer`: a name from headroom.measure.timers; `speedups`/`problems`: verify's
    result and the problem's entry, which make the estimate the a-priori one with its calibrated 90% interval;
    `graphs`: base and variant each captured as a CUDA graph and their replays timed; `tolerance`: relative L2
    error allowed per compared tensor (default by dtype); `timeout`: seconds the whole run may take; `threads`:
    torch CPU threads. Returns a `ValidateResult` (`.measured`, `.projected`, `.error`, `.part`;
    docs/validate.md)."""
    result, _ = validate_or_recompute(
        workload,
        list(replace),
        options,
        from_dir=from_dir,
        out=out,
        device=device,
        rounds=rounds,
        steps_per_round=steps_per_round,
        profile_steps=profile_steps,
        gate=tolerance,
        timeout=timeout,
        workload_file=workload_file,
        command=shlex.join(sys.argv),
        threads=threads,
        max_rounds=max_rounds,
        target_width=target_width,
        timing_budget=timing_budget,
        timer=timer,
        speedups=speedups,
        problems=problems,
        graphs=graphs,
    )
    return result
