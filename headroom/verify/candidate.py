"""The candidate loop: one candidate against one prepared reference.

Order, each step a command the harness sends (the child is frozen in between):
build (if it compiles extensions; outside every clock) -> start-up and
``ModelNew`` -> memory -> seven correctness trials (for each:
inputs written to the ring, the truth computed by the harness *before* the
candidate sees them, the candidate's outputs read from its memory and
compared, its inputs checked in the ring, everything freed; stop at the first
failure) -> sensitivity -> launches per call -> interleaved timing against the reference
(``session``) -> containment (no process it started may still run) ->
goodbye. A failed check is ``fail``; a crash, hang, exception, failed build
or harness allocation failure is ``error``; a correct candidate whose speedup
cannot be called is ``inconclusive``; otherwise ``pass``.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.jsonio import plain
from headroom.verify import build as bld
from headroom.verify import capture, shared, usage
from headroom.verify import checks as ck
from headroom.verify import compare as cmp
from headroom.verify import inputs as inp
from headroom.verify import problem as prob
from headroom.verify import process as proc
from headroom.verify import protocol as P
from headroom.verify.flags import review_flags
from headroom.verify.launches import CallProfile
from headroom.verify.options import VerifyOptions
from headroom.verify.process import Child, ChildFailed, Tampering, last_line
from headroom.verify.reference import HarnessOOM, ReferenceRun, job_for, prepare_reference, truth
from headroom.verify.results import VerifyResult
from headroom.verify.session import Timed, fresh_sets, place, reference_timing, time_candidate

# A trial whose device-wide synchronise waited past the limit is called this many more times (same inputs)
# before stream_ordering fails: on the H200 an honest cuDNN convolution once waited 278 us.
ORDERING_REPEATS = 2


def verify_candidate(
    problem_path: str | Path,
    candidate_path: str | Path,
    options: VerifyOptions | None = None,
    reference: ReferenceRun | None = None,
    progress: Callable[[str], None] | None = None,
    built: bld.BuildResult | None = None,
) -> VerifyResult:
    """Verify one candidate against one problem (the reference is prepared unless given)."""
    cand_path = prob.check_file(candidate_path, "candidate")
    own = reference is None
    if reference is None:
        reference = prepare_reference(problem_path, options or VerifyOptions(), progress)
    try:
        return _verify(reference, cand_path, progress or (lambda s: None), built)
    finally:
        if own:
            reference.close()


def _base_result(ref: ReferenceRun, cand_path: Path) -> VerifyResult:
    res = VerifyResult(
        problem=ref.name, candidate=str(cand_path), verdict="error", seed=ref.options.seed, device=ref.device
    )
    res.baseline = {**ref.baseline, "headline": "reference with TF32 enabled (allow_tf32 for cuBLAS and cuDNN)"}
    if not ref.device.startswith("cuda"):
        res.baseline["note"] = "CPU: the TF32 flags are set but have no effect; strict FP32 = the headline"
    res.info = {"inputs": ref.signs_note, "signed_inputs": ref.signed}
    if ref.scale is not None and ref.scale.overrides:
        res.info["scaled"] = plain(ref.scale)
    if ref.estimate is not None:
        res.info["estimate"] = plain(ref.estimate)
    return res


def _build(ref: ReferenceRun, cand_path: Path, built: bld.BuildResult | None, say: Callable) -> tuple:
    """(build result or None, extra env for the child, a temporary build dir to remove or None)."""
    build_dir = ref.options.build_dir
    tmp = None
    if build_dir is None and (built is not None or bld.needs_build(cand_path)):
        build_dir = tmp = bld.new_build_dir()
    if build_dir is None:
        return None, {}, None
    if built is None and bld.needs_build(cand_path):
        say(f"{ref.name} <- {cand_path.name}: building its extensions (outside the clock)")
        built = bld.build_one(
            ref.problem.path,
            cand_path,
            ref.device,
            build_dir,
            ref.options.build_timeout,
            ref.log_dir,
            jobs=0,
            env=ref.options.env,
            threads=ref.options.threads,
        )
    return built, bld.build_env(build_dir), tmp


def _verify(
    ref: ReferenceRun, cand_path: Path, say: Callable[[str], None], built: bld.BuildResult | None
) -> VerifyResult:
    t0 = time.monotonic()
    res = _base_result(ref, cand_path)
    if ref.error:
        res.reason = ref.error
        return res
    built, env, tmp_build = _build(ref, cand_path, built, say)
    try:
        if built is not None:
            res.build = plain(built)
            if not built.ok:
                res.reason = f"the build failed: {built.error}"
                return res
        _run(ref, cand_path, env, res, say)
    finally:
        if tmp_build:
            shutil.rmtree(tmp_build, ignore_errors=True)
        res.elapsed_s = time.monotonic() - t0
    say(
        f"{ref.name} <- {cand_path.name}: {res.verdict}"
        + (f" {res.speedup:.3g}x" if res.speedup else "")
        + (f" ({res.reason[:160]})" if res.verdict != "pass" and res.reason else "")
    )
    return res


def _run(ref: ReferenceRun, cand_path: Path, env: dict, res: VerifyResult, say: Callable[[str], None]) -> None:
    aggs = cmp.new_aggs()
    violations: set[str] = set()
    notes: dict[str, str] = {}
    timing: Timed | None = None
    caps: tuple = (None, None)  # --graphs: the candidate's and the reference's capture.Outcome
    child: Child | None = None
    candidate_peak: dict = {}
    error: str | None = None
    lost = len(proc.FORK_SERVER_LOST)
    try:
        child = Child(
            job_for(ref, "candidate", f"{ref.name}.{cand_path.stem}.log", str(cand_path.resolve()), env),
            ref.options.timeout,
        )
        violations.update(child.ready.violations)
        candidate_peak = _measure_memory(ref, child, violations)
        records, max_numel = _trials(ref, child, aggs, res.info, notes, violations)
        if records and all(a.passed for a in aggs.values()):
            cmp.sensitivity(records, aggs["sensitivity"])
        _integrity(aggs, violations)
        if ref.options.graphs and all(a.passed for a in aggs.values()):
            caps = _captures(ref, child, max_numel, say, violations)
            _integrity(aggs, violations)
        # launches and timing only for a correct candidate, and under --graphs one that both models' captures allow
        if all(a.passed for a in aggs.values()) and all(c is None or c.ok for c in caps):
            timing = _time(ref, child, records, max_numel, aggs, say, violations, candidate_peak, res)
    except Tampering as e:
        aggs["protocol"].record(False, str(e))
    except ChildFailed as e:
        error = e.reason
        last = last_line(e.log_tail)
        if last and last not in error:
            error += f" | log: {last}"
    except HarnessOOM as e:
        error = str(e)
    except UserError:  # the problem itself is broken (the reference fails): the user's error, as before
        raise
    except Exception as e:  # a harness bug still ends in a verdict with its reason, never an exception
        error = f"harness error: {type(e).__name__}: {e}"[:600]
    finally:
        _integrity(aggs, violations)
        if child is not None:
            _close(ref, child, res, aggs, error, lost)
    if aggs["protocol"].applicable is False:
        aggs["protocol"].record(True, "every message was requested, in order, and well formed")
    _finish(ref, res, aggs, timing, candidate_peak, error, notes, caps)


def _measure_memory(ref: ReferenceRun, child: Child, violations: set) -> dict:
    """The candidate's memory measurement (its first forward), on one input set."""
    args = place(ref, fresh_sets(ref, "memory", 1), [child])[0]
    mem = child.request(P.Memory(seq=0, args=args), stage="the memory measurement")
    violations.update(mem.violations)
    return {"peak_bytes": mem.peak_bytes, "method": mem.method, "free_bytes": mem.free_bytes}


def _time(
    ref: ReferenceRun,
    child: Child,
    records: list,
    max_numel: int,
    aggs: dict,
    say: Callable[[str], None],
    violations: set,
    candidate_peak: dict,
    res: VerifyResult,
) -> Timed:
    """A correct candidate's launches per call, then its interleaved timing against the reference."""
    la = child.request(
        P.Launches(seq=0, args=place(ref, fresh_sets(ref, "launches", 1), [child])[0]),
        stage="profiling one call",
    )
    violations.update(la.violations)
    call = CallProfile(
        la.count, la.method, la.kernel_us, la.syncs, la.d2h_bytes, tuple(tuple(k) for k in la.top_kernels)
    )
    timing = time_candidate(
        ref,
        child,
        cmp.out_gates(records),
        max_numel,
        aggs,
        say,
        violations,
        call,
        candidate_peak.get("free_bytes"),
    )
    res.launches_per_call = {
        "reference": ref.timing.launches if ref.timing else None,
        "candidate": la.count,
        "method": la.method,
    }
    return timing


def _close(ref: ReferenceRun, child: Child, res: VerifyResult, aggs: dict, error: str | None, lost: int) -> None:
    """After the candidate's last command: what its sandbox recorded, containment (the fork server still
    serving, no process it started still running), goodbye where it behaved, then the child closed."""
    res.info["sandbox"] = usage.report(child, ref.timing.child if ref.timing else None, ref.options.threads)
    if not proc.fork_server_ok():
        proc.replace_fork_server("it stopped listening while a candidate ran")
    if len(proc.FORK_SERVER_LOST) > lost:  # only a process with the harness's uid reaches its socket
        aggs["containment"].record(
            False,
            f"the harness's fork server stopped serving while the candidate "
            f"ran ({proc.FORK_SERVER_LOST[-1]}): the candidate reached it; "
            f"replaced",
        )
    strays = child.stray_processes()
    if strays:
        aggs["containment"].record(
            False,
            f"{len(strays)} process(es) the candidate started were still running (pids {strays[:5]}): killed",
        )
    else:
        aggs["containment"].record(True, "no process the candidate started outlived it")
    if error is None and aggs["protocol"].passed:
        bye = child.goodbye()
        if bye:
            aggs["protocol"].record(False, bye)
    child.close()


def _captures(ref: ReferenceRun, child: Child, max_numel: int, say: Callable[[str], None], violations: set) -> tuple:
    """``--graphs``: the candidate's capture and the reference's (checked once per reference child)."""
    rt = reference_timing(ref, max_numel, child, say)
    cand = capture.check(ref, child, max_numel, "the candidate", [rt.child])
    violations.update(cand.violations)
    say(
        f"{ref.name}: one call captured in a CUDA graph and replayed: reference "
        f"{rt.capture.status() if rt.capture else capture.NOT_CHECKED}, candidate {cand.status()}"
    )
    return cand, rt.capture


def _integrity(aggs: dict, violations: set) -> None:
    aggs["integrity"].record(
        not violations,
        "candidate replaced: " + ", ".join(sorted(violations))[:600]
        if violations
        else "no timer, stream, RNG, comparison or harness function replaced",
    )


def _trials(ref: ReferenceRun, child: Child, aggs: dict, info: dict, notes: dict, violations: set) -> tuple[list, int]:
    """The correctness trials, one at a time; stops at the first failed check."""
    records: list[cmp.TrialRecord] = []
    specs = inp.plan_trials(ref.seeds)
    info["trials"] = [s.label for s in specs]
    prev_spec, prev_args = None, None
    max_numel = 1024
    for spec in specs:
        inp.seed_trial(spec, ref.seeds, prev_spec)
        xs = inp.trial_inputs(ref.problem, spec, ref.device, ref.signed, ref.drawn)
        layout = [prev_args] if spec.reuse_buffers and prev_args is not None else None  # type: ignore[var-annotated]
        try:
            args_sets, views_sets = _place_trial(ref, xs, child, layout)
        except ValueError:  # shapes changed between the trial and its variant (jagged inputs)
            args_sets, views_sets = _place_trial(ref, xs, child, None)
        args, views = args_sets[0], views_sets[0]
        del xs
        before = [ck.digest(v) for v in views if _is_tensor(v)]
        tr = truth(ref, spec, views, notes)
        max_numel = max(max_numel, 4 * max((t.numel() for t in tr.ref_out), default=1) + 1024)
        reply = child.request(P.Trial(seq=0, index=spec.index, args=args), stage=f"trial {spec.index} ({spec.label})")
        violations.update(reply.violations)
        outs = shared.read_outputs(child, reply.outputs, max_numel, ref.device, tr.label, aggs)
        if ref.device.startswith("cuda"):
            waits = [reply.unordered_ms]
            # A wait past the limit once may be the child descheduled inside the synchronise: the same call
            # again. Each repeat's outputs are checked as the trial's are, so a repeat cannot hide a wrong call.
            while min(waits) > cmp.UNORDERED_MS and len(waits) <= ORDERING_REPEATS and outs is not None:
                again = child.request(
                    P.Trial(seq=0, index=spec.index, args=args), stage=f"trial {spec.index} ({spec.label}) again"
                )
                violations.update(again.violations)
                waits.append(again.unordered_ms)
                again_outs = shared.read_outputs(child, again.outputs, max_numel, ref.device, tr.label, aggs)
                if again_outs is not None:
                    cmp.compare_outputs(tr, again_outs, aggs, info)
                del again_outs
            cmp.record_ordering(tr.label, waits, aggs["stream_ordering"])
        after = [ck.digest(v) for v in views if _is_tensor(v)]
        cmp.record_inputs(tr.label, before, after, aggs["no_input_mutation"])
        errors: list = []
        digests = cmp.compare_outputs(tr, outs, aggs, info, errors) if outs is not None else None
        del outs
        records.append(cmp.TrialRecord(tr.label, tr.gates, [cmp.sketch(t) for t in tr.truth], digests or [], errors))
        del tr
        info["gates"] = [[plain(g) if g is not None else "exact" for g in r.gates] for r in records]
        if not all(a.passed for a in aggs.values()):
            break
        prev_spec, prev_args = spec, args
    info["truth_precision"] = "float64" if all(v == "float64" for v in notes.values()) else notes
    return records, max_numel


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _place_trial(ref: ReferenceRun, xs: list, child: Child, layout: list | None) -> tuple[list, list]:
    ring = ref.ensure_ring(shared.inputs_bytes(xs) + 4096)
    if child.ring_generation != ring.generation:
        child.request(P.MapRing(seq=0, ring=ring.spec), stage="map ring", ring=ring)
        child.ring_generation = ring.generation
        layout = None
    return ring.place([xs], layout)


def _finish(
    ref: ReferenceRun,
    res: VerifyResult,
    aggs: dict,
    timed: Timed | None,
    candidate_peak: dict,
    error: str | None,
    notes: dict,
    caps: tuple = (None, None),
) -> None:
    res.checks = [a.check() for a in aggs.values() if a.applicable]
    graphs = capture.judge(caps[0], caps[1], timed.timing if timed else None) if ref.options.graphs else None
    res.capture = graphs.capture if graphs else capture.NOT_CHECKED
    rt = ref.timing
    res.memory = {
        "reference_peak_bytes": rt.memory.get("peak_bytes") if rt else None,
        "candidate_peak_bytes": candidate_peak.get("peak_bytes"),
        "method": candidate_peak.get("method"),
    }
    if res.memory["reference_peak_bytes"] and res.memory["candidate_peak_bytes"]:
        res.memory_ratio = res.memory["candidate_peak_bytes"] / res.memory["reference_peak_bytes"]
        res.memory["extra_bytes"] = res.memory["candidate_peak_bytes"] - res.memory["reference_peak_bytes"]
    if rt is not None:
        res.device = rt.device_name or res.device
        res.baseline["fp32"] = {**rt.precision, "allow_tf32_matmul": False, "allow_tf32_cudnn": False}
    res.seed = ref.options.seed
    res.info["seeds"] = dict(ref.seeds.drawn)
    failed = [c for c in res.checks if not c.passed]
    if failed:
        res.verdict = "fail"
        res.reason = "; ".join(f"{c.name}: {c.detail}" for c in failed)[:1000]
        return
    if error is not None:
        res.verdict, res.reason = "error", error
        return
    if graphs is not None and graphs.verdict is not None:
        res.verdict, res.reason = graphs.verdict, graphs.reason
        if timed is not None:
            res.timing, res.per_call = timed.timing, timed.per_call
        return
    if timed is None:
        res.verdict, res.reason = "error", "the candidate was not timed"
        return
    timing, ratios = timed.timing, timed.ratios
    res.per_call = timed.per_call
    res.timing = timing
    if timing["inconclusive"]:
        res.verdict = "inconclusive"
        res.reason = "; ".join(timing["inconclusive"])
        return
    res.verdict = "pass"
    res.speedup = timing["speedup_estimate"]
    res.speedup_ci = timing["speedup_ci"]
    res.speedup_fp32 = ratios.get("reference_fp32") if ref.device.startswith("cuda") else res.speedup
    res.speedup_compile = ratios.get("reference_compile")
    if ref.options.vs_compile and rt is not None and rt.compile_error:
        res.timing["reference_compile_error"] = rt.compile_error
    io = (ref.estimate.inputs_bytes + ref.estimate.outputs_bytes) if ref.estimate else None
    cmed = (timing.get("candidate") or {}).get("median")
    res.flags, extra = review_flags(
        res.speedup, res.memory, res.memory_ratio, cmed, io, res.device, ref.device.startswith("cuda")
    )
    res.info.update(extra)
    res.flags.extend(usage.cpu_flags(res.info.get("sandbox")))
    res.flags.extend(usage.footprint_flags(res.info.get("sandbox")))
    if res.speedup is not None and not math.isfinite(res.speedup):
        res.verdict, res.speedup, res.reason = "inconclusive", None, "the speedup is not finite"
