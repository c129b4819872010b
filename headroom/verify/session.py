"""Timed phases and interleaved rounds, on the harness's clock (see ``timing`` for the statistics).

A phase, from the harness: write ``n`` fresh input sets into the ring (child
frozen), start the clock, thaw the child and send ``Run``, wait for its
``RunDone``, freeze it, read a sample of every iteration's every output from
its memory, stop the clock. Work the child skipped, deferred or hid shows in
those samples (compared with the reference's, same inputs and positions);
work it finished late is inside the clock. The child's own clock is only a
cross-check (``timing.cross_check``).

``ReferenceTiming`` is the reference's child for one problem, started when a
candidate first reaches timing and kept for the problem's other candidates:
it fixes ``n``, calibrates the phase overhead (null phases; sample reads; the
overhead subtracted is their minimum, a lower bound, kept current by a null
phase in every round) and the reference's stand-alone time.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from headroom.verify import checks as ck
from headroom.verify import launches
from headroom.verify import inputs as inp
from headroom.verify import protocol as P
from headroom.verify import shared
from headroom.verify import timing as tm
from headroom.verify.process import Child, ChildFailed, Tampering
from headroom.verify.procfs import sched_ns, thread_sched_ns
from headroom.verify.reference import HarnessOOM, ReferenceRun, is_oom, job_for


class HarnessError(Exception):
    """Timing could not run for a reason that is not the candidate's (verdict error)."""


@dataclass
class Phase:
    wall_ms: float
    read_ms: float
    child_ms: float
    wait_fraction: float
    samples: list  # per iteration, per output: sampled values
    shapes: list  # per iteration, per output: (dtype, shape)
    pos_seed: int  # where the samples were read (drawn after the child answered)
    outputs: list  # the child's descriptions (still valid until its next command)
    sampled: list  # which iterations were read (drawn after the child answered)
    violations: list = field(default_factory=list)  # the child's integrity report
    harness_wait_fraction: float = 0.0  # the harness's own wait for a CPU during the phase


def _sampled_iterations(pos_seed: int, n: int, count: int) -> list[int]:
    """Which iterations of a phase are read: all of them up to ``count``, else a random subset."""
    import random

    if n <= count:
        return list(range(n))
    return sorted(random.Random(inp.mix(pos_seed, "iterations")).sample(range(n), count))


def _positions(pos_seed: int, k: int, j: int, numel: int, count: int) -> Any:
    """Flat sample positions of iteration k's output j."""
    return shared.sample_positions(numel, count, inp.mix(pos_seed, k, j))


def run_phase(child: Child, args: list[list], run: dict, draw: Callable[[], int], policy: tm.Policy,
              max_numel: int, null: bool = False) -> Phase:
    """One phase on the harness's clock (raises Tampering when the outputs are not readable as described).

    The sample positions are drawn (``draw``) only after the child has answered: nothing in any
    process says beforehand which elements will be read.
    """
    import math

    child.settle_outputs()  # the last phase's unread shares, before the clock starts
    cpu0, w0 = sched_ns(child.pid)
    _, hw0 = thread_sched_ns()
    t0 = time.perf_counter()
    reply = child.request(P.Run(seq=0, batches=args, null=null, **run), stage="timing")
    t_reply = time.perf_counter()
    samples, shapes = [], []
    pos_seed = draw()
    sampled: list[int] = []
    if not null:
        if len(reply.outputs) != len(args):
            raise Tampering(f"{len(reply.outputs)} timed outputs for {len(args)} forwards")
        sampled = _sampled_iterations(pos_seed, len(args), policy.sampled_iterations)
        for k in sampled:
            srow, hrow = [], []
            for j, out in enumerate(reply.outputs[k]):
                if isinstance(out, P.Opaque):
                    raise Tampering(f"timed iteration {k}: output {j} is {out.type_name}, not a plain tensor")
                try:
                    shared.check_structure(out, max_numel)
                    n = math.prod(out.shape)
                    srow.append(shared.read_samples(child, out, _positions(pos_seed, k, j, n,
                                                                            policy.samples_per_output)))
                except Tampering:
                    raise
                except Exception as e:
                    raise Tampering(f"timed iteration {k}, output {j}: unreadable as described ({e})") from None
                hrow.append((out.dtype, tuple(out.shape)))
            samples.append(srow)
            shapes.append(hrow)
        try:
            samples = shared.finish_samples(samples)
        except Exception as e:
            raise Tampering(f"timed outputs unreadable as described ({e})") from None
    t1 = time.perf_counter()
    cpu1, w1 = sched_ns(child.pid)
    _, hw1 = thread_sched_ns()
    busy = (cpu1 - cpu0) + (w1 - w0)
    wall_ns = (t1 - t0) * 1e9
    return Phase((t1 - t0) * 1e3, (t1 - t_reply) * 1e3, float(sum(reply.child_ms)),
                 (w1 - w0) / busy if busy > 0 else 0.0, samples, shapes, pos_seed, reply.outputs, sampled,
                 list(reply.violations),
                 harness_wait_fraction=(hw1 - hw0) / wall_ns if wall_ns > 0 else 0.0)


@dataclass
class ReferenceTiming:
    """The reference's child for one problem and its calibration."""

    child: Child
    n: int
    max_numel: int
    overhead_ms: float = 0.0  # min(null phases) + min(sample reads): a lower bound, so net times stay positive
    null_min_ms: float = 0.0
    read_min_ms: float = 0.0
    alone_ms: list = field(default_factory=list)  # raw stand-alone phases of the reference
    standalone_ms: float = 0.0
    memory: dict = field(default_factory=dict)
    device_name: str = ""
    precision: dict = field(default_factory=dict)
    compile_error: str | None = None
    calibration: dict = field(default_factory=dict)
    launches: int | None = None

    def close(self) -> None:
        self.child.goodbye()
        self.child.close()


def fresh_sets(ref: ReferenceRun, key: str, n: int) -> list[list]:
    seed = ref.seeds.draw(key)
    return [inp.phase_inputs(ref.problem, inp.mix(seed, k), ref.device, ref.signed, ref.drawn) for k in range(n)]


def place(ref: ReferenceRun, sets: list[list], children: list[Child]) -> list[list]:
    """Write input sets into the ring (growing it, and re-mapping it in the children, if needed)."""
    need = sum(shared.inputs_bytes(s) for s in sets) + 4096
    ring = ref.ensure_ring(need)
    for c in children:
        if c.ring_generation != ring.generation:
            c.request(P.MapRing(seq=0, ring=ring.spec), stage="map ring")
            c.ring_generation = ring.generation
    return ring.place(sets)[0]


def _memory_budget(ref: ReferenceRun) -> int:
    import torch

    if ref.device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(ref.device))
        return int(free * 0.4)
    return int(ref.options.cpu_budget_bytes)


def start_reference(ref: ReferenceRun, max_numel: int, others: list[Child],
                    say: Callable[[str], None]) -> ReferenceTiming:
    """Start the reference child, measure its memory, choose ``n``, calibrate overhead and speed."""
    policy = ref.policy
    child = Child(job_for(ref, "reference", f"{ref.name}.reference.log"), ref.options.reference_timeout)
    rt = ReferenceTiming(child, 1, max_numel, device_name=child.ready.device_name,
                         precision=dict(child.ready.precision))
    try:
        one = fresh_sets(ref, "ref.memory", 1)
        args = place(ref, one, [child, *others])
        mem = child.request(P.Memory(seq=0, args=args[0]), stage="reference memory")
        rt.memory = {"peak_bytes": mem.peak_bytes, "method": mem.method}
        # counted in the harness (trusted code, one profiler for the whole run), on the same inputs
        rt.launches, _ = launches.count(ref.model, shared.view_all(ref.ring, args[0]), ref.device.startswith("cuda"))
        if ref.options.vs_compile:
            done = child.request(P.Compile(seq=0, args=args[0]), stage="torch.compile of the reference",
                                 timeout=ref.options.reference_timeout)
            rt.compile_error = done.error
        per_set = shared.inputs_bytes(one[0])
        out_bytes = ref.estimate.outputs_bytes if ref.estimate else per_set
        # the ring and the harness's copy of the inputs, and both children's kept outputs
        n_mem = max(1, _memory_budget(ref) // max(1, 2 * per_set + 2 * out_bytes))
        est = None
        n = 1
        for _ in range(2):  # warm up, then choose n from the reference's own clock (trusted code)
            sets = fresh_sets(ref, "ref.probe", n)
            ph = run_phase(child, place(ref, sets, [child, *others]), {"tf32": True}, _drawer(ref, "probe"), policy,
                           max_numel)
            est = max(ph.child_ms, 1e-3) / n
            n = tm.iterations(est, policy.target_phase_ms, policy.max_iters, n_mem)
        rt.n = n
        sets = fresh_sets(ref, "ref.calibration", n)
        nulls, reads, alone = [], [], []
        for i in range(policy.calibration_phases):
            args = place(ref, sets, [child, *others])
            nulls.append(run_phase(child, args, {"tf32": True}, _drawer(ref, "null"), policy, max_numel,
                                   null=True).wall_ms)
            ph = run_phase(child, place(ref, sets, [child, *others]), {"tf32": True}, _drawer(ref, "calibration"),
                           policy, max_numel)
            reads.append(ph.read_ms)
            alone.append(ph.wall_ms)
        rt.null_min_ms, rt.read_min_ms, rt.alone_ms = min(nulls), min(reads), alone
        rt.overhead_ms = rt.null_min_ms + rt.read_min_ms
        rt.standalone_ms = max(statistics.median(alone) - rt.overhead_ms, 1e-6) / n
        rt.calibration = {"null_phase_ms": nulls, "sample_read_ms": reads, "phase_ms": alone, "iters": n,
                          "estimate_ms_per_iter": est, "memory_limit_iters": n_mem}
        say(f"{ref.name}: reference timed alone at {rt.standalone_ms:.4g} ms/forward ({n} per phase, "
            f"overhead {rt.overhead_ms:.3g} ms per phase)")
    except BaseException:
        child.close()
        raise
    return rt


def arms(ref: ReferenceRun, rt: ReferenceTiming) -> list[tuple[str, dict]]:
    out = [("reference_tf32", {"tf32": True}), ("candidate", {"tf32": True})]
    if ref.device.startswith("cuda"):
        out.append(("reference_fp32", {"tf32": False}))
    if ref.options.vs_compile and rt.compile_error is None:
        out.append(("reference_compile", {"tf32": True, "compiled": True}))
    return out


def time_candidate(ref: ReferenceRun, cand: Child, gates: list, max_numel: int, aggs: dict,
                   say: Callable[[str], None], violations: set) -> dict:
    """Interleaved rounds of reference and candidate; returns the ``timing`` section of the result."""
    policy = ref.policy
    try:
        if ref.timing is None:
            ref.timing = start_reference(ref, max_numel, [cand], say)
        rt = ref.timing
        plan = arms(ref, rt)
        child_of = {name: (cand if name == "candidate" else rt.child) for name, _ in plan}
        children = [rt.child, cand]
        walls: dict[str, list[float]] = {name: [] for name, _ in plan}
        waits: dict[str, list[float]] = {"reference": [], "candidate": [], "harness": []}
        clocks: dict[str, list[float]] = {name: [] for name, _ in plan}
        for name, run in plan:  # warm-up phase of every arm
            run_phase(child_of[name], place(ref, fresh_sets(ref, f"warmup.{name}", rt.n), children), run,
                      _drawer(ref, f"warmup.{name}"), policy, max_numel)
        for r in range(policy.rounds):
            sets = fresh_sets(ref, f"round{r}", rt.n)
            phases: dict[str, Phase] = {}
            for name in tm.round_order([n for n, _ in plan], r):
                run = dict(plan)[name]
                phases[name] = run_phase(child_of[name], place(ref, sets, children), run,
                                         _drawer(ref, f"positions{r}.{name}"), policy, max_numel)
                if name in ("reference_tf32", "candidate") and len({"reference_tf32", "candidate"} & set(phases)) == 2:
                    # now, while the reference's outputs of this round are still in its process
                    _compare_round(rt.child, phases["reference_tf32"], phases["candidate"], gates, policy,
                                   aggs["timed_outputs"], r)
            # a null phase every round: the overhead's lower bound follows the machine
            rt.null_min_ms = min(rt.null_min_ms, run_phase(rt.child, place(ref, sets, children), {"tf32": True},
                                                           _drawer(ref, f"null{r}"), policy, max_numel,
                                                           null=True).wall_ms)
            rt.overhead_ms = rt.null_min_ms + rt.read_min_ms
            for name, ph in phases.items():
                walls[name].append(ph.wall_ms)
                clocks[name].append(ph.child_ms)
                waits["candidate" if name == "candidate" else "reference"].append(ph.wait_fraction)
                waits["harness"].append(ph.harness_wait_fraction)
                if name == "candidate":
                    violations.update(ph.violations)
                    bad = tm.cross_check(ph.wall_ms, ph.child_ms)
                    aggs["timer_consistency"].record(bad is None, (bad + ": its clock or its messages were tampered "
                                                                   "with") if bad else
                                                     "the child's own clock agrees with the harness's")
            if not aggs["timed_outputs"].passed or not aggs["timer_consistency"].passed:
                break
    except HarnessOOM:
        raise
    except (ChildFailed, Tampering):
        raise
    except Exception as e:
        if is_oom(e):
            raise HarnessOOM(f"out of memory in the harness while timing: {e}"[:300]) from None
        raise
    per = {name: [(w - rt.overhead_ms) / rt.n for w in ws] for name, ws in walls.items()}
    rt.standalone_ms = max(statistics.median(rt.alone_ms) - rt.overhead_ms, 1e-6) / rt.n
    drift = statistics.median(per["reference_tf32"]) / rt.standalone_ms if per["reference_tf32"] else None
    judged = tm.judge(per["reference_tf32"], per["candidate"], policy,
                      {k: statistics.median(v) for k, v in waits.items() if v}, drift)
    out = {"method": "harness_clock", "unit": "ms", "rounds": len(per["candidate"]), "iters_per_phase": rt.n,
           "warmup_phases": 1, "overhead_ms": rt.overhead_ms,
           "ci_method": "order statistics of the per-round ratios (distribution-free CI of a median)",
           "speedup_estimate": judged.speedup, "speedup_ci": list(judged.ci) if judged.ci else None,
           "ci_coverage": judged.coverage, "inconclusive": judged.reasons,
           "reference_standalone_ms": rt.standalone_ms, "reference_drift": drift,
           "wait_fraction": {k: statistics.median(v) for k, v in waits.items() if v},
           "child_clock_ms": {k: statistics.median(v) / rt.n for k, v in clocks.items() if v},
           "calibration": rt.calibration}
    for name, _ in plan:
        out[name] = tm.stats(per[name])
        out[f"{name}_per_round"] = per[name]
    ratios = {}
    for name in ("reference_fp32", "reference_compile"):
        if per.get(name):
            ratios[name] = statistics.median([a / b for a, b in zip(per[name], per["candidate"]) if a > 0 and b > 0]
                                             or [float("nan")])
    out["_ratios"] = ratios
    return out


def _drawer(ref: ReferenceRun, key: str) -> Callable[[], int]:
    return lambda: ref.seeds.draw(key)


def _compare_round(ref_child: Child, ref_ph: Phase, cand_ph: Phase, gates: list, policy: tm.Policy, agg: Any,
                   r: int) -> None:
    """Every timed iteration's samples must match the reference's at the same positions.

    The reference's outputs of this round are still in its (frozen) process: they are read at
    the positions the candidate's samples were taken at, drawn after the candidate answered.
    """
    import math

    for k, crow in zip(cand_ph.sampled, cand_ph.samples):
        rrow = ref_ph.outputs[k]
        rshape = [(o.dtype, tuple(o.shape)) for o in rrow if not isinstance(o, P.Opaque)]
        cshape = cand_ph.shapes[cand_ph.sampled.index(k)]
        if rshape != cshape:
            agg.record(False, f"round {r}, timed iteration {k}: outputs {cshape}, the reference's {rshape}")
            return
        for j, (cv, rout) in enumerate(zip(crow, rrow)):
            n = math.prod(rout.shape)
            rv = shared.finish_samples([[shared.read_samples(ref_child, rout, _positions(
                cand_ph.pos_seed, k, j, n, policy.samples_per_output))]])[0][0]
            g = gates[j] if j < len(gates) else None
            ok, detail = ck.samples_match(cv, rv, g, ck.rms(shared.read_full(ref_child, rout, ref_child.job.device)))
            if not ok:
                agg.record(False, f"round {r}, timed iteration {k}, output {j}: {detail} (a stale, cached, "
                                  f"skipped or unfinished output while timed)")
                return
    agg.record(True, f"timed outputs match the reference's at iterations and positions drawn after the child "
                     f"answered (up to {policy.sampled_iterations} iterations x {policy.samples_per_output} "
                     f"elements per phase)")
