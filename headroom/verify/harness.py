"""``verify_candidate``: is a KernelBench candidate correct, and how much faster is it, really?

Process layout (one verify):

- **this process (the harness)** loads the problem (trusted), draws a secret
  seed, builds the seven correctness trials, runs the reference on them in the
  headline precision (TF32 on) and in float64 (the truth), and keeps the truth,
  the gates and the input digests. It never imports the candidate.
- **a reference child** measures the reference's peak memory and times it
  (TF32 headline, strict FP32, optionally ``torch.compile``), recording a
  fingerprint of every timed output.
- **a candidate child** (one per candidate, fresh process, time limit) builds
  ``ModelNew``, measures its memory, runs the trials (outputs and post-call
  inputs come back for comparison here), then, if every check passed, is timed
  with the same protocol, its timed outputs fingerprinted against the
  reference's.

``prepare_reference`` does the first two once per problem; ``verify_candidate``
reuses it for any number of candidates; ``verify_suite`` does a directory.
"""

from __future__ import annotations

import copy
import json
import math
import multiprocessing as mp
import os
import secrets
import shutil
import signal
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from headroom.errors import UserError
from headroom.verify import checks as ck
from headroom.verify import inputs as inp
from headroom.verify import problem as prob
from headroom.verify import wire

RESULTS_TOOL = "headroom verify"
RESULTS_VERSION = 1
MEMORY_FLAG_RATIO = 1.05
LARGE_SPEEDUP = 10.0


# --- options and results --------------------------------------------------------------------


@dataclass
class VerifyOptions:
    """How to verify. ``None`` means the device's default."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    warmup: int | None = None  # default 3 (GPU) / 1 (CPU)
    iters: int | None = None  # default 20 (GPU) / 5 (CPU)
    timeout: float = 300.0  # seconds for one candidate child, start to finish
    reference_timeout: float = 900.0
    vs_compile: bool = False
    seed: int | None = None  # the secret seed (None: fresh; set it only to reproduce a run)
    env: dict[str, str] = field(default_factory=dict)  # applied in every process before the problem is imported
    transport: str = "ipc"  # ipc | bytes (CUDA outputs: IPC handles, or copies through the pipe)
    threads: int | None = None  # torch CPU threads in the children (None: torch's default)
    keep_logs: bool = False
    log_dir: str | None = None

    def resolved_device(self) -> str:
        import torch

        dev = self.device
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        if dev != "cpu" and not (dev == "cuda" or (dev.startswith("cuda:") and dev[5:].isdigit())):
            raise UserError(f"--device {self.device}: expected auto, cpu, cuda or cuda:N")
        if dev.startswith("cuda"):
            if not torch.cuda.is_available():
                raise UserError(f"--device {self.device}: CUDA is not available on this machine")
            if dev == "cuda":
                dev = f"cuda:{torch.cuda.current_device()}"
            if int(dev[5:]) >= torch.cuda.device_count():
                raise UserError(f"--device {self.device}: this machine has {torch.cuda.device_count()} GPU(s)")
        return dev

    def n_warmup(self, device: str) -> int:
        return self.warmup if self.warmup is not None else (3 if device.startswith("cuda") else 1)

    def n_iters(self, device: str) -> int:
        return self.iters if self.iters is not None else (20 if device.startswith("cuda") else 5)


@dataclass
class Check:
    name: str
    passed: bool
    detail: str

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass
class VerifyResult:
    """One candidate's verdict (``to_dict()`` is the ``--json`` contract)."""

    problem: str
    candidate: str
    verdict: str  # pass | fail | error
    speedup: float | None = None
    speedup_fp32: float | None = None
    speedup_compile: float | None = None
    memory_ratio: float | None = None
    checks: list[Check] = field(default_factory=list)
    flags: list[Check] = field(default_factory=list)
    device: str = ""
    baseline: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    reason: str | None = None
    seed: int | None = None
    info: dict = field(default_factory=dict)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return {
            "problem": self.problem, "candidate": self.candidate, "verdict": self.verdict,
            "speedup": self.speedup, "speedup_fp32": self.speedup_fp32, "speedup_compile": self.speedup_compile,
            "memory_ratio": self.memory_ratio, "checks": [c.to_dict() for c in self.checks],
            "flags": [{"name": f.name, "detail": f.detail} for f in self.flags],
            "review": bool(self.flags), "device": self.device, "baseline": self.baseline, "timing": self.timing,
            "memory": self.memory, "reason": self.reason, "seed": self.seed, "info": self.info,
            "elapsed_s": round(self.elapsed_s, 3),
        }


# --- child processes --------------------------------------------------------------------------

_CTX: Any = None


def _context() -> Any:
    """A forkserver that has imported torch (not CUDA): children start in ~50 ms, clean."""
    global _CTX
    if _CTX is None:
        ctx = mp.get_context("forkserver")
        try:
            ctx.set_forkserver_preload(["headroom.verify.child"])
        except Exception:  # pragma: no cover
            pass
        _CTX = ctx
    return _CTX


def _signal_name(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _child_entry(conn: Any, job: dict) -> None:
    """The child's entry point (the child module is preloaded by the fork server, not imported here)."""
    from headroom.verify.child import main

    main(conn, job)


def _start_without_main(proc: Any) -> None:
    """Start a child without re-importing the caller's ``__main__`` in it.

    multiprocessing re-runs the parent's main script in spawned/forkserver
    children (so scripts need an ``if __name__ == "__main__"`` guard); the
    child's entry point is importable by name, so the harness drops that step.
    """
    from multiprocessing import spawn

    orig = spawn.get_preparation_data

    def prep(name: str) -> dict:
        d = orig(name)
        d.pop("init_main_from_path", None)
        d.pop("init_main_from_name", None)
        return d

    spawn.get_preparation_data = prep
    try:
        proc.start()
    finally:
        spawn.get_preparation_data = orig


class ChildFailed(Exception):
    def __init__(self, reason: str, log_tail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.log_tail = log_tail


class Child:
    """A running child process and its message pipe (with a wall-clock deadline)."""

    def __init__(self, job: dict, timeout: float):
        self.job = job
        self.timeout = timeout
        self.log_path = job.get("log_path")
        self.first = True
        self._start()

    def _start(self) -> None:
        ctx = _context()
        self.conn, theirs = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_child_entry, args=(theirs, self.job), daemon=False)
        self.started = time.monotonic()
        self.deadline = self.started + self.timeout
        self.stage = "start-up"
        _start_without_main(self.proc)
        theirs.close()

    def recv(self) -> tuple[dict, list[bytes]]:
        global _CTX
        msg, blobs = self._recv()
        if self.first and msg.get("type") == "error" and msg.get("kind") == "bad_fork":
            # CUDA got initialised in the fork server (a preload side effect): fall back to spawn
            self.close()
            _CTX = mp.get_context("spawn")
            self._start()
            msg, blobs = self._recv()
        self.first = False
        if msg.get("type") == "error":
            self.proc.join(10)
            where = msg.get("stage", self.stage)
            raise ChildFailed(f"{msg.get('message', 'error')} (during {where})", self.log_tail())
        return msg, blobs

    def _recv(self) -> tuple[dict, list[bytes]]:
        try:
            msg, blobs = wire.recv(self.conn, self.deadline)
        except wire.Timeout:
            self.kill()
            raise ChildFailed(f"timed out after {self.timeout:.0f} s (during {self.stage})", self.log_tail())
        except wire.ChildGone:
            self.proc.join(5)
            raise ChildFailed(f"the child process {_signal_name(self.proc.exitcode)} during {self.stage}",
                              self.log_tail())
        return msg, blobs

    def send(self, header: dict) -> None:
        try:
            wire.send(self.conn, header)
        except (OSError, BrokenPipeError):
            pass

    def log_tail(self, n: int = 1500) -> str:
        try:
            if self.log_path and os.path.exists(self.log_path):
                with open(self.log_path, "rb") as f:
                    f.seek(0, 2)
                    size = f.tell()
                    f.seek(max(0, size - n))
                    return f.read().decode(errors="replace")
        except OSError:
            pass
        return ""

    def kill(self) -> None:
        if self.proc.is_alive():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
            try:
                self.proc.kill()
            except Exception:
                pass
        self.proc.join(5)

    def close(self) -> None:
        self.proc.join(10)
        self.kill()
        try:
            self.conn.close()
        except OSError:
            pass


# --- the reference ------------------------------------------------------------------------------


@dataclass
class TrialTruth:
    spec: inp.TrialSpec
    input_digests: list  # before the call (None for non-tensors)
    expected_after: list  # after the reference's call (equal unless the reference mutates its inputs)
    truth: list  # float64 (exact dtypes: the reference's output)
    ref_out: list  # the reference in the headline precision
    gates: list  # Gates | None per output
    truth_digests: list


@dataclass
class ReferenceRun:
    problem: prob.Problem
    options: VerifyOptions
    device: str
    secret: int
    seeds: dict
    trials: list[TrialTruth] = field(default_factory=list)
    truth_precision: str = "float64"
    device_name: str = ""
    baseline: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)  # phase -> {"times_ms", "stats", "fingerprints", "wall_s", "error"}
    peak_bandwidth: float | None = None
    peak_bandwidth_source: str = ""
    io_bytes: int | None = None
    error: str | None = None
    log_dir: str = ""
    warmup: int = 0
    iters: int = 0
    _cleanup: Any = field(default=None, repr=False)  # removes a temporary log_dir

    @property
    def name(self) -> str:
        return self.problem.name

    def out_gate(self, j: int) -> float:
        """The largest rel-L2 gate plus reference error of output j over the trials (for fingerprints)."""
        g = 0.0
        for t in self.trials:
            gt = t.gates[j] if j < len(t.gates) else None
            if gt is not None:
                g = max(g, gt.rel_l2 + (gt.ref.rel_l2 if gt.ref is not None and math.isfinite(gt.ref.rel_l2) else 0))
        return g

    def output_bytes(self) -> int:
        if not self.trials:
            return 0
        return int(sum(t.numel() * t.element_size() for t in self.trials[0].ref_out))


def _digests(xs: list) -> list:
    import torch

    return [ck.digest(x) if isinstance(x, torch.Tensor) else None for x in xs]


def _to_double(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.double()
    return x


def _truth_forward(model64: Any, xs: list) -> list:
    import torch

    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            return prob.flatten_outputs(model64(*[_to_double(x) for x in xs]))
    finally:
        torch.set_default_dtype(prev)


def _new_log_dir(options: VerifyOptions) -> str:
    if options.log_dir:
        os.makedirs(options.log_dir, exist_ok=True)
        return options.log_dir
    return tempfile.mkdtemp(prefix="headroom-verify-")


def prepare_reference(problem_path: str | Path, options: VerifyOptions | None = None,
                      progress: Callable[[str], None] | None = None) -> ReferenceRun:
    """Load a problem, compute its truth on the secret trials and time the reference (in a child)."""
    import torch

    from headroom.verify.timing import precision_state, set_tf32

    options = options or VerifyOptions()
    device = options.resolved_device()
    problem = prob.load_problem(problem_path, options.env)
    secret = options.seed if options.seed is not None else secrets.randbits(62)
    seeds = {"init_seed": inp.mix(secret, "init"), "timing_seed": inp.mix(secret, "time"),
             "fp_seed": inp.mix(secret, "fingerprint"), "mem_seed": inp.mix(secret, "memory")}
    ref = ReferenceRun(problem, options, device, secret, seeds, log_dir=_new_log_dir(options),
                       warmup=options.n_warmup(device), iters=options.n_iters(device))
    if not options.keep_logs and options.log_dir is None:  # a temporary directory: removed with the reference
        ref._cleanup = weakref.finalize(ref, shutil.rmtree, ref.log_dir, True)
    say = progress or (lambda s: None)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    saved = precision_state()
    try:
        set_tf32(True)
        try:
            model = prob.build_model(problem.Model, problem, seeds["init_seed"], device)
        except Exception as e:
            raise UserError(f"{problem.path}: Model(*get_init_inputs()) fails: {type(e).__name__}: {e}") from None
        try:
            model64 = copy.deepcopy(model).double()
        except Exception:
            model64 = prob.build_model(problem.Model, problem, seeds["init_seed"], device).double()
        prev = None
        for spec in inp.trial_specs(secret):
            xs = inp.make_trial_inputs(problem, spec, device, prev)
            before = _digests(xs)
            xs_truth = [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
            try:
                with torch.no_grad():
                    ref_out = [o.detach().clone() if isinstance(o, torch.Tensor) else o
                               for o in prob.flatten_outputs(model(*xs))]
            except Exception as e:
                raise UserError(f"{problem.path}: the reference fails on trial {spec.index} ({spec.label}): "
                                f"{type(e).__name__}: {e}") from None
            ref_out = [o if isinstance(o, torch.Tensor) else torch.as_tensor(o, device=device) for o in ref_out]
            after = _digests(xs)
            try:
                truth = _truth_forward(model64, xs_truth)
                truth = [t if isinstance(t, torch.Tensor) else torch.as_tensor(t, device=device) for t in truth]
                if len(truth) != len(ref_out) or any(a.shape != b.shape for a, b in zip(truth, ref_out)):
                    raise RuntimeError("float64 outputs differ in structure")
            except Exception:
                ref.truth_precision = "float32 (the reference does not run in float64)"
                set_tf32(False)
                fresh = inp.make_trial_inputs(problem, spec, device, None)
                with torch.no_grad():
                    truth = [o.detach().clone() for o in prob.flatten_outputs(model(*fresh))]
                set_tf32(True)
            gates = []
            truth_final = []
            for r, t in zip(ref_out, truth):
                if ck.is_exact_dtype(r.dtype):
                    gates.append(None)
                    truth_final.append(r)
                else:
                    t64 = t.double()
                    gates.append(ck.gates_for(r.dtype, ck.measure(r, t64)))
                    truth_final.append(t64)
            ref.trials.append(TrialTruth(spec, before, after, truth_final, ref_out, gates,
                                         [ck.digest(t) for t in truth_final]))
            prev = xs
            del xs_truth
        del model, model64, prev
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    finally:
        set_tf32(saved["allow_tf32_matmul"])
        torch.backends.cudnn.allow_tf32 = saved["allow_tf32_cudnn"]
    say(f"{problem.name}: truth computed ({ref.truth_precision}); timing the reference")
    _run_reference_child(ref)
    return ref


def _job(ref: ReferenceRun, role: str, log_name: str, candidate: str | None = None) -> dict:
    phases = ["tf32"]
    if role == "reference":
        phases = ["tf32", "fp32"] + (["compile"] if ref.options.vs_compile else [])
    job = {"role": role, "problem": str(ref.problem.path), "candidate": candidate, "device": ref.device,
           "env": dict(ref.options.env), **ref.seeds, "warmup": ref.warmup, "iters": ref.iters,
           "phases": phases, "transport": ref.options.transport,
           "log_path": os.path.join(ref.log_dir, log_name), "bandwidth": role == "reference",
           "threads": ref.options.threads}
    if role == "candidate":
        job["trials"] = [t.spec.to_dict() for t in ref.trials]
        job["poison_bytes"] = 2 * ref.output_bytes() + (64 << 20)
    return job


def _run_reference_child(ref: ReferenceRun) -> None:
    child = Child(_job(ref, "reference", f"{ref.name}.reference.log"), ref.options.reference_timeout)
    phase_start: dict[str, float] = {}
    try:
        while True:
            msg, _ = child.recv()
            kind = msg.get("type")
            if kind == "ready":
                ref.device_name = msg.get("device_name", "")
                ref.baseline["tf32"] = True
                ref.baseline.update(msg.get("precision", {}))
                ref.baseline["torch"] = msg.get("torch")
                child.stage = "the memory measurement"
            elif kind == "memory":
                ref.memory = {k: v for k, v in msg.items() if k not in ("type", "violations")}
                child.stage = "timing"
            elif kind == "timing_start":
                phase_start[msg["phase"]] = time.monotonic()
                child.stage = f"timing ({msg['phase']})"
            elif kind == "timing":
                ph = msg["phase"]
                wall = time.monotonic() - phase_start.get(ph, time.monotonic())
                entry = {"times_ms": msg.get("times_ms") or [], "fingerprints": msg.get("fingerprints"),
                         "current_stream_ms": msg.get("current_stream_ms"), "wall_s": wall,
                         "error": msg.get("error"), "precision": msg.get("precision")}
                entry["stats"] = _stats(entry["times_ms"])
                ref.timing[ph] = entry
                if ph == "fp32" and msg.get("precision"):
                    ref.baseline["fp32"] = msg["precision"]
            elif kind == "done":
                ref.peak_bandwidth = msg.get("peak_bandwidth")
                ref.peak_bandwidth_source = msg.get("peak_bandwidth_source", "")
                ref.io_bytes = msg.get("io_bytes")
                break
    except ChildFailed as e:
        ref.error = f"the reference failed: {e.reason}"
        if e.log_tail:
            ref.error += f" | log: {_last_line(e.log_tail)}"
    finally:
        child.close()
    if "tf32" not in ref.timing and ref.error is None:
        ref.error = "the reference was not timed"
    elif ref.error is None and ref.timing["tf32"].get("error"):
        ref.error = f"the reference failed while being timed: {ref.timing['tf32']['error']}"


def _stats(times: list) -> dict:
    from headroom.verify.timing import stats

    return stats([float(t) for t in times])


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


# --- comparing one trial ------------------------------------------------------------------------


class _Agg:
    """Accumulates per-trial outcomes into one check (worst case kept for the detail)."""

    def __init__(self, name: str):
        self.name = name
        self.passed = True
        self.fail_detail = ""
        self.worst: tuple[float, str] | None = None
        self.last_ok = "ok"
        self.applicable = False

    def record(self, ok: bool, detail: str, value: float | None = None) -> None:
        self.applicable = True
        if not ok and self.passed:
            self.passed = False
            self.fail_detail = detail
        if ok:
            self.last_ok = detail
        if value is not None and (self.worst is None or value > self.worst[0]):
            self.worst = (value, detail)

    def check(self, na: str = "not applicable") -> Check:
        if not self.applicable:
            return Check(self.name, True, na)
        if not self.passed:
            return Check(self.name, False, self.fail_detail)
        return Check(self.name, True, self.worst[1] if self.worst else self.last_ok)


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:.2e}"


def _compare_trial(tt: TrialTruth, msg: dict, tensors: list, aggs: dict[str, _Agg], info: dict,
                   cand_digests: list) -> None:
    import torch

    label = f"trial {tt.spec.index} ({tt.spec.label})"
    n_out = int(msg.get("n_out", 0))
    outs = tensors[:n_out]
    ins = tensors[n_out:]
    plain = msg.get("plain", [])
    types = msg.get("output_types", [])
    # structure and types
    if not all(plain):
        bad = [t for t, p in zip(types, plain) if not p]
        aggs["output_type"].record(False, f"{label}: output is {bad[0]}, not a plain torch.Tensor "
                                          f"(tensor subclasses and lazy tensors are rejected)")
        return
    if len(outs) != len(tt.truth):
        aggs["output_type"].record(False, f"{label}: {len(outs)} output(s), the reference returns {len(tt.truth)}")
        return
    for j, (c, r) in enumerate(zip(outs, tt.ref_out)):
        if tuple(c.shape) != tuple(r.shape) or c.dtype != r.dtype:
            aggs["output_type"].record(False, f"{label}: output {j} is {c.dtype} {tuple(c.shape)}, "
                                              f"expected {r.dtype} {tuple(r.shape)}")
            return
    aggs["output_type"].record(True, f"{len(outs)} plain tensor output(s), shapes and dtypes match")
    # inputs: identical to the harness's, and unchanged by the call
    cand_in_digests = [ck.digest(x) for x in ins]
    exp_before = [d for d in tt.input_digests if d is not None]
    exp_after = [d for d in tt.expected_after if d is not None]
    child_before = [d for d in msg.get("input_digests", []) if d is not None]
    if child_before != exp_before:
        aggs["same_inputs"].record(False, f"{label}: the candidate's process generated different inputs "
                                          f"(random-number functions tampered with?)")
    else:
        aggs["same_inputs"].record(True, "inputs bit-identical to the harness's in every trial")
    if cand_in_digests != exp_after:
        changed = [i for i, (a, b) in enumerate(zip(cand_in_digests, exp_after)) if a != b]
        aggs["no_input_mutation"].record(False, f"{label}: input(s) {changed} were modified by the candidate")
    else:
        aggs["no_input_mutation"].record(True, "inputs unchanged after every call (exact digest)")
    # values
    kb_ok = True
    for j, (c, t, r, g) in enumerate(zip(outs, tt.truth, tt.ref_out, tt.gates)):
        tag = f"{label}, output {j}" if len(outs) > 1 else label
        cand_digests.append(ck.digest(c))
        if tt.spec.kind == "published":
            kb_ok = kb_ok and ck.kernelbench_allclose(c, r)
        if g is None:
            ok = bool(torch.equal(c, r)) or bool(torch.equal(c, t))
            if ok:
                aggs["exact"].record(True, "integer outputs equal the reference's exactly")
            else:
                n_bad = int((c != r).sum())
                aggs["exact"].record(False, f"{tag}: {n_bad} of {r.numel()} integer elements differ")
            continue
        e = ck.measure(c, t)
        aggs["finite"].record(e.finite_ok, f"{tag}: {e.nonfinite} unexpected NaN/Inf value(s)"
                              if not e.finite_ok else "no NaN/Inf where the truth is finite")
        if not e.finite_ok:
            continue
        aggs["rel_l2"].record(e.rel_l2 <= g.rel_l2,
                              f"{tag}: relative L2 error {_fmt(e.rel_l2)} (gate {_fmt(g.rel_l2)})",
                              e.rel_l2 / g.rel_l2)
        aggs["allclose"].record(e.elem <= g.elem,
                                f"{tag}: max element error {_fmt(e.elem)} x (rms + |t|) (gate {_fmt(g.elem)})",
                                e.elem / g.elem)
        if e.centred is not None:
            aggs["centred"].record(e.centred <= g.centred,
                                   f"{tag}: centred relative error {_fmt(e.centred)} (gate {_fmt(g.centred)})",
                                   e.centred / g.centred)
        info.setdefault("max_rel_l2", 0.0)
        info["max_rel_l2"] = max(info["max_rel_l2"], e.rel_l2)
    if tt.spec.kind == "published":
        info["kernelbench_allclose"] = kb_ok


# --- one candidate --------------------------------------------------------------------------------


CHECK_ORDER = ("integrity", "output_type", "same_inputs", "no_input_mutation", "finite", "rel_l2", "allclose",
               "centred", "exact", "sensitivity", "timed_outputs", "stream_ordering", "timer_consistency")


def verify_candidate(problem_path: str | Path, candidate_path: str | Path, options: VerifyOptions | None = None,
                     reference: ReferenceRun | None = None,
                     progress: Callable[[str], None] | None = None) -> VerifyResult:
    """Verify one candidate against one problem (the reference is prepared unless given)."""
    options = options or VerifyOptions()
    cand_path = prob.check_file(candidate_path, "candidate")
    own = reference is None
    if reference is None:
        prob.check_problem_file(problem_path)
        reference = prepare_reference(problem_path, options, progress)
    try:
        return _verify(reference, cand_path, progress)
    finally:
        if own:
            _drop_logs(reference)


def _drop_logs(ref: ReferenceRun) -> None:
    """Remove the reference's temporary log directory now (it goes with the reference anyway)."""
    cleanup = getattr(ref, "_cleanup", None)
    if cleanup is not None:
        cleanup()


def _verify(ref: ReferenceRun, cand_path: Path, progress: Callable[[str], None] | None) -> VerifyResult:
    import torch

    t0 = time.monotonic()
    res = VerifyResult(problem=ref.name, candidate=str(cand_path), verdict="error", device=ref.device_name or ref.device,
                       seed=ref.secret)
    res.baseline = _baseline(ref)
    res.info = {"truth_precision": ref.truth_precision,
                "trials": [t.spec.label for t in ref.trials],
                "gates": [[g.to_dict() if g is not None else "exact" for g in t.gates] for t in ref.trials]}
    if ref.error:
        res.reason = ref.error
        res.elapsed_s = time.monotonic() - t0
        return res
    aggs = {n: _Agg(n) for n in CHECK_ORDER}
    violations: set[str] = set()
    cand_digests: list[list] = []
    tdev = torch.device(ref.device)
    timing_msg: dict | None = None
    timing_wall = None
    phase_start = None
    memory: dict = {}
    trials_by_index = {t.spec.index: t for t in ref.trials}
    child = Child(_job(ref, "candidate", f"{ref.name}.{cand_path.stem}.log", str(cand_path.resolve())),
                  ref.options.timeout)
    child.stage = "import and construction of ModelNew"
    all_ok = True
    try:
        while True:
            msg, blobs = child.recv()
            kind = msg.get("type")
            violations.update(msg.get("violations") or [])
            if kind == "ready":
                child.stage = "the memory measurement (first forward)"
            elif kind == "memory":
                memory = {k: v for k, v in msg.items() if k not in ("type", "violations")}
                child.stage = "trial 0"
            elif kind == "trial":
                tt = trials_by_index.get(int(msg.get("index", -1)))
                if tt is None:
                    raise ChildFailed("the child sent an unknown trial")
                try:
                    tensors = [wire.decode_tensor(m, blobs, tdev) for m in msg.get("tensors", [])]
                except Exception as e:
                    if any(m.get("kind") == "cuda_ipc" for m in msg.get("tensors", [])):
                        res.info["transport"] = f"bytes (CUDA IPC failed: {type(e).__name__}: {e})"[:300]
                        child.send({"type": "resend"})
                        msg2, blobs2 = child.recv()
                        tensors = [wire.decode_tensor(m, blobs2, tdev) for m in msg2.get("tensors", [])]
                    else:
                        raise ChildFailed(f"malformed output from the child: {e}")
                digests_row: list = []
                _compare_trial(tt, msg, tensors, aggs, res.info, digests_row)
                cand_digests.append(digests_row)
                del tensors
                child.send({"type": "ok"})
                child.stage = f"trial {tt.spec.index + 1}"
                if tt.spec.index == ref.trials[-1].spec.index:
                    all_ok = all(a.passed for a in aggs.values()) and not violations
                    _sensitivity(ref, cand_digests, aggs["sensitivity"])
                    all_ok = all_ok and aggs["sensitivity"].passed
                    child.send({"type": "proceed" if all_ok else "stop"})
                    child.stage = "timing"
            elif kind == "timing_start":
                phase_start = time.monotonic()
                child.stage = "timing"
            elif kind == "timing":
                timing_wall = time.monotonic() - (phase_start or time.monotonic())
                timing_msg = msg
            elif kind == "done":
                break
    except ChildFailed as e:
        res.reason = e.reason
        if e.log_tail:
            last = _last_line(e.log_tail)
            if last and last not in res.reason:
                res.reason += f" | log: {last}"
        res.memory = memory
        res.checks = [a.check() for a in aggs.values() if a.applicable]
        res.elapsed_s = time.monotonic() - t0
        return res
    finally:
        child.close()
    # integrity
    aggs["integrity"].record(not violations, "candidate replaced: " + ", ".join(sorted(violations))[:600]
                             if violations else "no timer, stream, memory, RNG or harness function replaced")
    # timing
    if timing_msg is not None:
        _timing_checks(ref, timing_msg, timing_wall, aggs, res)
    res.memory = _memory(ref, memory, res)
    res.checks = [aggs[n].check() for n in CHECK_ORDER if aggs[n].applicable]
    failed = [c for c in res.checks if not c.passed]
    if failed:
        res.verdict = "fail"
        res.reason = "; ".join(f"{c.name}: {c.detail}" for c in failed)[:1000]
        res.speedup = res.speedup_fp32 = res.speedup_compile = None
    elif timing_msg is None:
        res.verdict = "error"
        res.reason = "the candidate was not timed"
    else:
        res.verdict = "pass"
        _flags(ref, res)
    res.elapsed_s = time.monotonic() - t0
    if progress:
        progress(f"{ref.name} <- {Path(res.candidate).name}: {res.verdict}"
                 + (f" {res.speedup:.3g}x" if res.speedup else ""))
    return res


def _materially_different(a: TrialTruth, b: TrialTruth, o: int) -> bool:
    """Whether output ``o``'s truth differs between two trials by more than rounding.

    Functions invariant to a shift or a scale of their inputs (softmax,
    cross-entropy, argmax, normalisations) give the same answer for a trial and
    its variant: no change is expected there.
    """
    import torch

    ta, tb = a.truth[o], b.truth[o]
    if ta.shape != tb.shape:
        return True
    g = a.gates[o]
    if g is None:
        return not bool(torch.equal(ta, tb))
    fa = ta.reshape(-1)
    diff = float(torch.linalg.vector_norm(fa - tb.reshape(-1)))
    allowed = g.rel_l2 * float(torch.linalg.vector_norm(fa))  # what a candidate may be off by
    if fa.numel() > 1:
        allowed = min(allowed, g.centred * float(torch.linalg.vector_norm(fa - fa.mean())))
    return diff > 10 * allowed


def _sensitivity(ref: ReferenceRun, cand_digests: list[list], agg: _Agg) -> None:
    """The candidate's output must change when its inputs (and the true output) change."""
    n = min(len(cand_digests), len(ref.trials))
    pairs = 0
    for i in range(n):
        for j in range(i + 1, n):
            for o, (a, b) in enumerate(zip(cand_digests[i], cand_digests[j])):
                if not _materially_different(ref.trials[i], ref.trials[j], o):
                    continue
                pairs += 1
                if a == b:
                    agg.record(False, f"output {o} is bit-identical for trials {i} and {j} although the "
                                      f"inputs (and true outputs) differ: a constant or cached answer")
                    return
    if pairs:
        agg.record(True, f"outputs change with the inputs ({pairs} trial pairs)")


def _baseline(ref: ReferenceRun) -> dict:
    b = dict(ref.baseline)
    b.setdefault("tf32", True)
    b["headline"] = "reference with TF32 enabled (allow_tf32 for cuBLAS and cuDNN)"
    if not ref.device.startswith("cuda"):
        b["note"] = "CPU: the TF32 flags are set but have no effect"
    return b


def _timing_checks(ref: ReferenceRun, msg: dict, wall: float | None, aggs: dict[str, _Agg],
                   res: VerifyResult) -> None:
    cand_times = [float(t) for t in msg.get("times_ms") or []]
    cst = _stats(cand_times)
    rt = ref.timing.get("tf32", {})
    # timed outputs against the reference's fingerprints
    fps_c = msg.get("fingerprints") or []
    fps_r = rt.get("fingerprints") or []
    if fps_r:
        bad = None
        for k, (rc, rr) in enumerate(zip(fps_c, fps_r)):
            for j, (fc, fr) in enumerate(zip(rc, rr)):
                if "type" in fc:
                    bad = f"timed iteration {k}: output {j} is a {fc['type']}, not a plain tensor"
                    break
                ok, detail = ck.fingerprint_matches(fc, fr, ref.out_gate(j))
                if not ok:
                    bad = f"timed iteration {k}, output {j}: {detail} (stale, cached or incomplete output)"
                    break
            if bad:
                break
        if len(fps_c) != len(fps_r) and bad is None:
            bad = f"{len(fps_c)} timed outputs, expected {len(fps_r)}"
        aggs["timed_outputs"].record(bad is None, bad or f"all {len(fps_c)} timed outputs match the reference's "
                                                         f"fingerprints (fresh inputs every iteration)")
    # side streams: time outside the harness's stream, beyond the reference's sync overhead
    cs_c = msg.get("current_stream_ms")
    cs_r = rt.get("current_stream_ms")
    if cs_c and cs_r and cand_times:
        import statistics

        hidden_c = statistics.median([a - b for a, b in zip(cand_times, cs_c)])
        hidden_r = statistics.median([a - b for a, b in zip(rt["times_ms"], cs_r)])
        allowed = max(0.1 * cst["median"], 0.02) + max(hidden_r, 0.0)
        aggs["stream_ordering"].record(
            hidden_c <= allowed,
            f"{hidden_c * 1e3:.1f} us of each iteration ran after the caller's stream was done (allowed "
            f"{allowed * 1e3:.1f} us): work on a side stream not joined to the current stream"
            if hidden_c > allowed else
            f"all work ordered on the caller's stream ({hidden_c * 1e3:.1f} us sync overhead)")
    # the child's clock against the harness's
    if wall is not None and cand_times:
        total_s = sum(cand_times) / 1e3
        ok = total_s <= wall * 1.05 + 0.005
        aggs["timer_consistency"].record(
            ok, f"the child reported {total_s:.3f} s of timed work inside a {wall:.3f} s phase"
            + ("" if ok else " (impossible: its clock was tampered with)"))
    r_tf32 = rt.get("stats", {}).get("median")
    c_med = cst.get("median")
    if c_med and r_tf32:
        res.speedup = r_tf32 / c_med
        fp = ref.timing.get("fp32", {}).get("stats", {}).get("median")
        res.speedup_fp32 = fp / c_med if fp else None
        cm = ref.timing.get("compile", {}).get("stats", {}).get("median")
        res.speedup_compile = cm / c_med if cm else None
    res.timing = {
        "method": "cuda_events+device_sync" if ref.device.startswith("cuda") else "wall_clock",
        "unit": "ms", "warmup": ref.warmup, "iters": ref.iters,
        "l2_flush": True, "fresh_inputs_per_iteration": True,
        "reference_tf32": rt.get("stats"),
        "reference_fp32": ref.timing.get("fp32", {}).get("stats"),
        "reference_compile": ref.timing.get("compile", {}).get("stats")
        if "compile" in ref.timing and not ref.timing["compile"].get("error") else None,
        "candidate": cst,
        "reference_fp32_over_tf32": (ref.timing["fp32"]["stats"]["median"] / r_tf32)
        if r_tf32 and ref.timing.get("fp32", {}).get("stats", {}).get("median") else None,
    }
    if ref.timing.get("compile", {}).get("error"):
        res.timing["reference_compile_error"] = ref.timing["compile"]["error"]
    # wall-clock estimate of the candidate's time (same harness overhead in both phases)
    if wall is not None and rt.get("wall_s") and c_med and r_tf32 and cand_times:
        n = len(cand_times)
        est = r_tf32 + (wall - rt["wall_s"]) * 1e3 / n
        overhead = max(0.0, rt["wall_s"] * 1e3 / n - r_tf32)  # the harness's own work per iteration
        res.timing["candidate_wall_estimate_ms"] = est
        if est > 4.0 * c_med + 0.5 * overhead + 1.0:
            res.flags.append(Check("wall_clock", False, f"the harness's wall clock suggests ~{est:.3f} ms per "
                                                        f"iteration, the candidate's timer {c_med:.3f} ms"))


def _memory(ref: ReferenceRun, cand: dict, res: VerifyResult) -> dict:
    rp = ref.memory.get("peak_bytes")
    cp = cand.get("peak_bytes")
    out = {"reference_peak_bytes": rp, "candidate_peak_bytes": cp, "method": cand.get("method") or ref.memory.get(
        "method")}
    if rp and cp:
        res.memory_ratio = cp / rp
        out["extra_bytes"] = cp - rp
    return out


def _flags(ref: ReferenceRun, res: VerifyResult) -> None:
    rp = res.memory.get("reference_peak_bytes") or 0
    cp = res.memory.get("candidate_peak_bytes") or 0
    slack = (1 << 20) if ref.device.startswith("cuda") else (8 << 20)
    if res.memory_ratio and res.memory_ratio > MEMORY_FLAG_RATIO and cp - rp > slack:
        res.flags.append(Check("memory", False, f"the candidate needs {res.memory_ratio:.2f}x the reference's "
                                                f"peak memory ({(cp - rp) / 2**20:.1f} MiB more)"))
    cmed = (res.timing.get("candidate") or {}).get("median")
    if ref.peak_bandwidth and ref.io_bytes and cmed:
        t_min_ms = ref.io_bytes / ref.peak_bandwidth * 1e3
        res.info["roofline_min_ms"] = t_min_ms
        if res.speedup:
            res.info["roofline_speedup_bound"] = res.speedup * cmed / t_min_ms if t_min_ms > 0 else None
        if cmed < t_min_ms:
            res.flags.append(Check("roofline", False, f"{cmed * 1e3:.1f} us is below the time to move the inputs "
                                                      f"and outputs once ({ref.io_bytes / 2**20:.1f} MiB at "
                                                      f"{ref.peak_bandwidth / 1e12:.2f} TB/s = {t_min_ms * 1e3:.1f} us)"))
    if res.speedup and res.speedup > LARGE_SPEEDUP:
        res.flags.append(Check("large_speedup", False, f"{res.speedup:.1f}x over the TF32 reference: review"))


# --- suites ------------------------------------------------------------------------------------


def candidates_for(stem: str, candidates_dir: Path) -> list[Path]:
    """Candidates of one problem: ``DIR/<stem>.py`` and ``DIR/<stem>/*.py``."""
    found = []
    single = candidates_dir / f"{stem}.py"
    if single.is_file():
        found.append(single)
    sub = candidates_dir / stem
    if sub.is_dir():
        found.extend(sorted(p for p in sub.glob("*.py") if not p.name.startswith("_")))
    return found


def problems_in(suite_dir: Path) -> list[Path]:
    if not suite_dir.is_dir():
        raise UserError(f"{suite_dir}: suite directory not found")
    return sorted((p for p in suite_dir.glob("*.py") if not p.name.startswith("_")), key=_natural)


def _natural(p: Path) -> tuple:
    import re

    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.stem))


def suite_document(results: list[VerifyResult], device: str, **extra: Any) -> dict:
    return {"tool": RESULTS_TOOL, "version": RESULTS_VERSION, "device": device,
            "results": [r.to_dict() for r in results], **extra}


def verify_suite(suite_dir: str | Path, candidates_dir: str | Path, options: VerifyOptions | None = None,
                 out: str | Path | None = None, problems: list[str] | None = None,
                 progress: Callable[[str], None] | None = None) -> dict:
    """Verify every candidate of every problem in ``suite_dir``; returns (and writes) the results document."""
    options = options or VerifyOptions()
    suite = Path(suite_dir)
    cdir = Path(candidates_dir)
    if not cdir.is_dir():
        raise UserError(f"{cdir}: candidates directory not found")
    paths = problems_in(suite)
    if problems:
        wanted = set(problems)
        unknown = wanted - {p.stem for p in paths}
        if unknown:
            raise UserError(f"{suite}: no problem named {', '.join(sorted(unknown))}")
        paths = [p for p in paths if p.stem in wanted]
    results: list[VerifyResult] = []
    missing: list[str] = []
    device = ""
    for p in paths:
        cands = candidates_for(p.stem, cdir)
        if not cands:
            missing.append(p.stem)
            continue
        try:
            ref = prepare_reference(p, options, progress)
        except UserError as e:
            for c in cands:
                results.append(VerifyResult(p.stem, str(c), "error", reason=str(e)))
            continue
        device = device or ref.device_name or ref.device
        try:
            for c in cands:
                results.append(verify_candidate(p, c, options, reference=ref, progress=progress))
        finally:
            _drop_logs(ref)
        del ref
        _free_device_memory()
    doc = suite_document(results, device or options.device, missing_candidates=missing)
    if out is not None:
        write_json(doc, out)
    return doc


def _free_device_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def write_json(doc: Any, path: str | Path) -> None:
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(dumps(doc) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, float):
        return None
    return str(o)


def dumps(doc: Any) -> str:
    return json.dumps(_clean(doc), indent=2, default=_json_default, allow_nan=False)


def _clean(o: Any) -> Any:
    """Replace NaN/Inf (not valid JSON) with None."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o
