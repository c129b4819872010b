"""The reference side of a problem: loaded once, shared by every candidate of the problem.

``prepare_reference`` loads the (trusted) problem in the harness — scaled for a
CPU when it would not fit (``scale``; printed, with the memory estimate,
before anything is allocated) — builds the model and its float64 copy,
decides which inputs may be signed (``inputs.probe_signs``) and allocates
the shared input ring. The truth is not
computed here: each candidate's trials have fresh inputs, so ``truth``
computes one trial's truth when that trial runs, and the caller frees it
after the comparison (one trial in memory at a time).

Truth precision: float64 (parameters, floating inputs and the default dtype)
where it runs and fits; otherwise the reference in strict FP32 (TF32 off),
recorded per trial in ``info.truth_precision`` — never silently. An
allocation failure in the harness is a ``HarnessOOM``, reported as verdict
``error`` with the reason.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.verify import checks as ck
from headroom.verify import inputs as inp
from headroom.verify import problem as prob
from headroom.verify import ring as input_ring
from headroom.verify import scale as sc
from headroom.verify import shared
from headroom.verify.compare import Truth
from headroom.verify.options import VerifyOptions
from headroom.verify.precision import precision_state, set_tf32
from headroom.verify.timing import Policy


class HarnessOOM(Exception):
    """The harness itself could not allocate (verdict error, with where and how much)."""


def is_oom(e: BaseException) -> bool:
    import torch

    return isinstance(e, (MemoryError, torch.OutOfMemoryError)) or "out of memory" in str(e).lower()


@dataclass
class ReferenceRun:
    problem: prob.Problem
    options: VerifyOptions
    device: str
    policy: Policy
    seeds: inp.Seeds
    init_seed: int
    model: Any = None
    model64: Any = None
    signed: list = field(default_factory=list)
    drawn: list = field(default_factory=list)  # inputs that get fresh values (inputs.drawn_positions)
    signs_note: str = ""
    scale: sc.ScalePlan | None = None
    estimate: sc.Estimate | None = None
    truth_fp32_note: str | None = None  # set once float64 is known not to work for this problem
    ring: input_ring.Ring | None = None
    baseline: dict = field(default_factory=dict)
    log_dir: str = ""
    error: str | None = None
    timing: Any = None  # session.ReferenceTiming, created when a candidate first reaches timing
    clock: Any = None  # gate.ClockPage: the gated GPU clock's shared page (GPU only)
    _cleanup: Any = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.problem.name

    @property
    def overrides(self) -> dict:
        return dict(self.scale.overrides) if self.scale else {}

    def ensure_ring(self, nbytes: int) -> input_ring.Ring:
        """A ring of at least ``nbytes`` (a new one if the current is smaller: children re-map it)."""
        if self.ring is None or self.ring.nbytes < nbytes:
            if self.ring is not None:
                self.ring.close()
                self.ring = None
            try:
                self.ring = input_ring.Ring(int(nbytes * 1.25), self.device)
            except Exception as e:
                if is_oom(e):
                    raise HarnessOOM(f"out of memory allocating the {nbytes / 2**20:.0f} MB input ring") from None
                raise
        return self.ring

    def close(self) -> None:
        if self.timing is not None:
            self.timing.close()
            self.timing = None
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        if self.clock is not None:
            self.clock.close()
            self.clock = None
        self.model = self.model64 = None  # the reference lives in the harness: its weights go now
        if self.device.startswith("cuda"):
            import gc

            import torch

            gc.collect()  # tensors in reference cycles (a profiler's, a model's) before the cache is emptied
            torch.cuda.synchronize(self.device)
            torch.cuda.ipc_collect()
            torch.cuda.empty_cache()
        if self._cleanup is not None:
            self._cleanup()


def _new_log_dir(options: VerifyOptions) -> str:
    if options.log_dir:
        os.makedirs(options.log_dir, exist_ok=True)
        return options.log_dir
    return tempfile.mkdtemp(prefix="headroom-verify-")


def prepare_reference(
    problem_path: str | Path, options: VerifyOptions | None = None, progress: Callable[[str], None] | None = None
) -> ReferenceRun:
    """Load a problem (scaled on a CPU when needed) and its reference; see the module docstring."""
    import torch

    options = options or VerifyOptions()
    say = progress or (lambda s: None)
    device = options.resolved_device()
    policy = options.resolved_policy(device)
    path = prob.check_problem_file(problem_path)
    seeds = inp.Seeds(options.seed)
    plan = None
    if device == "cpu" and options.scale == "auto":
        plan = sc.plan(path, options.env, options.cpu_budget_bytes, options.cpu_budget_flops)
        if plan.overrides:
            full = prob.load_problem(path, options.env)
            say(
                f"{path.stem}: scaled for the CPU ({sc.describe_overrides(vars(full.module), plan.overrides)}): "
                f"{plan.full.describe() if plan.full else '?'} -> {plan.scaled.describe() if plan.scaled else '?'}"
            )
    problem = prob.load_problem(path, options.env, plan.overrides if plan else None)
    estimate = plan.scaled if plan else sc.estimate(problem)
    if estimate is not None and not (plan and plan.overrides):
        say(f"{problem.name}: estimated {estimate.describe()}")
    ref = ReferenceRun(
        problem,
        options,
        device,
        policy,
        seeds,
        seeds.draw("init"),
        scale=plan,
        estimate=estimate,
        log_dir=_new_log_dir(options),
    )
    if not options.keep_logs and options.log_dir is None:
        ref._cleanup = weakref.finalize(ref, shutil.rmtree, ref.log_dir, True)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        from headroom.verify.gate import ClockPage

        ref.clock = ClockPage()
    saved = precision_state()
    try:
        ref.baseline = {"tf32": True, **set_tf32(True), "torch": str(torch.__version__)}
        try:
            ref.model = prob.build_model(problem.Model, problem, ref.init_seed, device)
        except Exception as e:
            if is_oom(e):
                ref.error = f"out of memory in the harness building the reference: {e}"[:400]
                return ref
            raise UserError(f"{problem.path}: Model(*get_init_inputs()) fails: {type(e).__name__}: {e}") from None
        try:
            ref.model64 = copy.deepcopy(ref.model).double()
        except Exception as e:
            ref.model64 = None
            ref.truth_fp32_note = f"float64 copy of the model failed ({type(e).__name__})"
        ref.drawn = inp.drawn_positions(prob.published_inputs(problem, seeds.draw("templates"), device))
        ref.signed, ref.signs_note = inp.probe_signs(problem, ref.model, device, seeds.draw("probe"), ref.drawn)
        xs = inp.phase_inputs(problem, seeds.draw("ring"), device, ref.signed, ref.drawn)
        ref.ensure_ring(shared.inputs_bytes(xs) + (1 << 20))
        del xs
    except HarnessOOM as e:
        ref.error = str(e)
    except UserError:
        raise
    except Exception as e:
        if not is_oom(e):
            raise UserError(f"{problem.path}: the reference fails: {type(e).__name__}: {e}") from None
        ref.error = f"out of memory in the harness preparing the reference: {e}"[:400]
    finally:
        if isinstance(
            saved["allow_tf32_matmul"], bool
        ):  # else torch's precision APIs were mixed: not a flag to restore
            set_tf32(saved["allow_tf32_matmul"])
        if isinstance(saved["allow_tf32_cudnn"], bool):
            torch.backends.cudnn.allow_tf32 = saved["allow_tf32_cudnn"]
    return ref


def _forward_float64(ref: ReferenceRun, xs: list) -> list:
    """The harness's float64 copy of the model on ``xs`` (the truth of a trial and of a timed check)."""
    import torch

    prev = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        return _forward(ref.model64, [_to_double(x) for x in xs])
    finally:
        torch.set_default_dtype(prev)


def _to_double(x: Any) -> Any:
    import torch

    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _forward(model: Any, xs: list) -> list:
    import torch

    with torch.no_grad():
        outs = prob.flatten_outputs(model(*xs))
    return [o.detach().clone() if isinstance(o, torch.Tensor) else torch.as_tensor(o) for o in outs]


def _reference_forward(ref: ReferenceRun, xs: list, spec: inp.TrialSpec, doing: str) -> list:
    """The reference on one trial's inputs; out of memory is the harness's, anything else the problem's."""
    try:
        return _forward(ref.model, xs)
    except Exception as e:
        if is_oom(e):
            raise HarnessOOM(f"out of memory in the harness {doing}") from None
        raise UserError(
            f"{ref.problem.path}: the reference fails on trial {spec.index} ({spec.label}): {type(e).__name__}: {e}"
        ) from None


def truth(ref: ReferenceRun, spec: inp.TrialSpec, xs: list, notes: dict) -> Truth:
    """The reference (headline precision) and the truth on one trial's inputs, and the trial's gates."""
    import torch

    set_tf32(True)
    ref_out = _reference_forward(ref, xs, spec, f"running the reference on {spec.label}")
    t_out = None
    if ref.model64 is not None and ref.truth_fp32_note is None:
        try:
            t_out = _forward_float64(ref, xs)
            if len(t_out) != len(ref_out) or any(a.shape != b.shape for a, b in zip(t_out, ref_out)):
                raise RuntimeError("float64 outputs differ in structure")
        except Exception as e:
            t_out = None
            ref.truth_fp32_note = (
                "float64 did not fit in memory"
                if is_oom(e)
                else f"the reference does not run in float64 ({type(e).__name__})"
            )
        if ref.device.startswith("cuda"):
            torch.cuda.empty_cache()
    if t_out is None:
        set_tf32(False)
        try:
            t_out = _reference_forward(ref, xs, spec, f"computing the truth of {spec.label}")
        finally:
            set_tf32(True)
        notes[spec.label] = f"float32, TF32 off ({ref.truth_fp32_note})"
    else:
        notes[spec.label] = "float64"
    truth_t, gates = [], []  # type: ignore[var-annotated]
    for r, t in zip(ref_out, t_out):
        if ck.is_exact_dtype(r.dtype):
            gates.append(None)  # type: ignore[arg-type]
            truth_t.append(r)
        else:
            gates.append(ck.gates_for(r.dtype, ck.measure(r, t, r)))
            truth_t.append(t)
    return Truth(spec.label, spec.kind == "published", truth_t, ref_out, gates)


def job_for(
    ref: ReferenceRun, role: str, log_name: str, candidate: str | None = None, extra_env: dict[str, str] | None = None
) -> Any:
    """The start-up description of a child for this problem (no seed but the construction seed)."""
    from headroom.verify import protocol as P

    return P.Job(
        role=role,
        problem=str(ref.problem.path.resolve()),
        overrides={k: list(v) if isinstance(v, tuple) else v for k, v in ref.overrides.items()},
        candidate=candidate,
        device=ref.device,
        env={**ref.options.env, **(extra_env or {})},
        threads=ref.options.threads,
        log_path=os.path.join(ref.log_dir, log_name),
        file_cap_bytes=ref.options.file_cap_bytes,
        init_seed=ref.init_seed,
        clock_path=ref.clock.path if ref.clock is not None and role != "build" else None,
        clock_slot=ref.clock.slot() if ref.clock is not None and role != "build" else 0,
    )


def timed_truth(ref: ReferenceRun, xs: list) -> list | None:
    """The truth on one timed input set, as a trial computes it (``truth``): float64 where the problem
    runs in it, else float32 with TF32 off; exact outputs are the harness's reference's own. None when
    it does not fit in memory next to the timing's ring (the check is skipped, not the candidate's
    loss). It checks the reference's child's sampled timed output (``session``): that child is the
    one the candidate could reach, the harness's copy of the model is not."""
    import torch

    try:
        out = None
        if ref.model64 is not None and ref.truth_fp32_note is None:
            try:
                out = _forward_float64(ref, xs)
            except Exception as e:
                if is_oom(e):
                    raise
                out = None  # as in a trial: the float32 truth below
        if out is None:
            set_tf32(False)
            try:
                out = _forward(ref.model, xs)
            finally:
                set_tf32(True)
        if any(ck.is_exact_dtype(o.dtype) for o in out):
            own = _forward(ref.model, xs)
            out = [r if ck.is_exact_dtype(r.dtype) else t for r, t in zip(own, out)]
        return out
    except Exception as e:
        if is_oom(e):
            return None
        raise
    finally:
        if ref.device.startswith("cuda"):
            torch.cuda.empty_cache()
