"""Timed phases and interleaved rounds, on the harness's clock (``timing`` says how they are judged).

A **gated phase** (GPU, ``gate``): the harness sends ``Run`` naming ``n`` input sets in the ring; the
child enqueues a wait on its gate word, the forwards and a write of its flag word, and replies
(the harness times this: the CPU cost of ``n`` calls, ``enqueue_ms``); the harness freezes it,
writes the inputs into the ring, starts its clock, opens the gate, spins until the flag, gathers
samples of every sampled iteration's outputs through mappings opened once, and stops its clock
when they are on the host. The forwards run back to back as in a GPU-bound model; no message, no
wake-up and no IPC handle is inside the clock.

A **plain phase** (CPU; a GPU without stream memory operations; a candidate whose enqueue waited on
the GPU, i.e. synchronised with the host): the harness writes the inputs, starts its clock, thaws
the child and sends ``Run``; the child runs the forwards (on a GPU then synchronises) and replies;
the harness freezes it, reads the samples and stops its clock.

Either way work the child skipped, deferred or hid shows in the samples (compared with the
reference's outputs of the same round, same inputs, same positions, drawn after the child
answered), and work it finished late is inside the clock. The child's own clock (CUDA events) is
a cross-check only (``timing.cross_check``).

``ReferenceTiming`` is the reference's child for one problem, started when a candidate first
reaches timing and kept for the problem's other candidates: it fixes ``n`` and calibrates the
overheads (null phases of every child; the reference's sample reads) and its stand-alone time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from headroom.measure import interleave_rounds
from headroom.verify import checks as ck
from headroom.verify import inputs as inp
from headroom.verify import launches, shared
from headroom.verify import protocol as P
from headroom.verify import timing as tm
from headroom.verify.launches import CallProfile
from headroom.verify.process import Child, ChildFailed, Tampering
from headroom.verify.procfs import sched_ns, thread_sched_ns
from headroom.verify.reference import HarnessOOM, ReferenceRun, is_oom, job_for, timed_truth


class HarnessError(Exception):
    """Timing could not run for a reason that is not the candidate's (verdict error)."""


@dataclass
class Phase:
    wall_ms: float  # the clock: gate opened (plain: Run sent) -> samples on the host
    read_ms: float  # flag seen (plain: reply received) -> samples on the host: the sample read's cost
    enqueue_ms: float  # Run sent -> reply (gated: the CPU side of the n calls)
    child_ms: float | None  # the child's own clock (gated: of its previous gated phase)
    gated: bool
    blocked: bool  # a gated enqueue did not finish in time: the child waited on the GPU
    wait_fraction: float
    samples: list  # per sampled iteration, per output: sampled values
    shapes: list  # per sampled iteration, per output: (dtype, shape)
    pos_seed: int  # where the samples were read (drawn after the child answered)
    outputs: list  # the child's descriptions (valid until its next command)
    sampled: list  # which iterations were read (drawn after the child answered)
    violations: list = field(default_factory=list)  # the child's integrity report
    harness_wait_fraction: float = 0.0  # the harness's own wait for a CPU during the phase
    flag_ms: float = 0.0  # gated: gate opened -> flag seen (the forwards on the GPU); plain: wall - read
    write_ms: float = 0.0  # gated: the harness writing the inputs into the ring (the child frozen)
    null: bool = False
    args: list = field(default_factory=list)  # where each input set is in the ring


def _sampled_iterations(pos_seed: int, n: int, count: int) -> list[int]:
    """Which iterations of a phase are read: all of them up to ``count``, else a random subset."""
    import random

    if n <= count:
        return list(range(n))
    return sorted(random.Random(inp.mix(pos_seed, "iterations")).sample(range(n), count))


def _positions(pos_seed: int, k: int, j: int, numel: int, count: int) -> Any:
    """Flat sample positions of iteration k's output j."""
    return shared.sample_positions(numel, count, inp.mix(pos_seed, k, j))


def _read(child: Child, reply: Any, n: int, pos_seed: int, policy: tm.Policy,
          max_numel: int) -> tuple[list, list, list]:
    """Samples of the sampled iterations' outputs, read from the child's memory (batched)."""
    import math

    if len(reply.outputs) != n:
        raise Tampering(f"{len(reply.outputs)} timed outputs for {n} forwards")
    sampled = _sampled_iterations(pos_seed, n, policy.sampled_iterations)
    items, shapes = [], []
    seen: set = set()
    for k in sampled:
        hrow = []
        for j, out in enumerate(reply.outputs[k]):
            if isinstance(out, P.Opaque):
                raise Tampering(f"timed iteration {k}: output {j} is {out.type_name}, not a plain tensor")
            try:
                shared.check_structure(out, max_numel)
            except Exception as e:
                raise Tampering(f"timed iteration {k}, output {j}: unreadable as described ({e})") from None
            if isinstance(out, P.SegTensor) and math.prod(out.shape) > 0:
                where = (out.segment, out.offset)
                if where in seen:  # outputs of a phase are live at once: two cannot share storage
                    raise Tampering(f"timed iteration {k}, output {j}: the same memory as an earlier output of "
                                    f"the phase (outputs recycled while timed)")
                seen.add(where)
            items.append((out, _positions(pos_seed, k, j, math.prod(out.shape), policy.samples_per_output)))
            hrow.append((out.dtype, tuple(out.shape)))
        shapes.append(hrow)
    try:
        flat = shared.gather_samples(child, items, child.job.device)
    except Tampering:
        raise
    except Exception as e:
        raise Tampering(f"timed outputs unreadable as described ({e})") from None
    samples, i = [], 0
    for hrow in shapes:
        samples.append(flat[i:i + len(hrow)])
        i += len(hrow)
    return samples, shapes, sampled


def run_phase(child: Child, ref: ReferenceRun, sets: list[list], run: dict, draw: Callable[[], int],
              policy: tm.Policy, max_numel: int, others: list[Child], null: bool = False,
              gated: bool = True) -> Phase:
    """One phase on the harness's clock (raises Tampering when the outputs are not readable as described).

    The sample positions are drawn (``draw``) only after the child has answered: nothing in any
    process says beforehand which elements will be read."""
    clock = ref.clock
    gated = gated and clock is not None and child.ready.gated
    if child.holds_outputs:  # its last outputs poisoned and freed (``child._poison``) before the clock starts,
        child.request(P.Release(seq=0), stage="releasing outputs")  # as before every trial
    child.settle_outputs()  # the last phase's unread torch shares, before the clock starts
    cpu0, w0 = sched_ns(child.pid)
    _, hw0 = thread_sched_ns()
    n = len(sets)
    if gated:
        args = place(ref, sets, [child, *others], write=False)  # the inputs go in once the child is frozen
        ring = ref.ring
        assert ring is not None  # place made it
        # a null phase writes the same inputs: the GPU then switches from the harness's context (its
        # copy) to the child's inside the clock, as in a timed phase (~145 us per phase on the H200)
        staged = ring.stage(sets, args)
        token = clock.token()
        opened: list[float] = []

        def open_gate() -> None:  # the child is waiting on the GPU inside its enqueue (a host sync)
            ring.commit(staged)  # its kernels are gated: none has read the ring yet
            opened.append(time.perf_counter())
            clock.open(child.job.clock_slot, token)

        t_send = time.perf_counter()
        reply = child.request(P.Run(seq=0, batches=args, null=null, token=token, **run), stage="timing",
                              freeze=False, first_wait=policy.enqueue_timeout_s, on_slow=open_gate)
        t_reply = time.perf_counter()
        child.freeze()
        blocked = bool(opened)
        t_w = time.perf_counter()
        if not blocked:
            ring.commit(staged)
            t0 = time.perf_counter()
            clock.open(child.job.clock_slot, token)
            write_ms = (t0 - t_w) * 1e3
        else:
            t0 = opened[0]
            write_ms = 0.0
        if not clock.wait_flag(child.job.clock_slot, token, max(60.0, 50 * policy.enqueue_timeout_s)):
            raise ChildFailed("the GPU work of a timed phase did not finish in 60 s (during timing)",
                              child.log_tail())
        t_flag = time.perf_counter()
        enqueue_ms = (t_reply - t_send) * 1e3
    else:
        args = place(ref, sets, [child, *others])
        blocked = False
        write_ms = 0.0
        t0 = time.perf_counter()
        reply = child.request(P.Run(seq=0, batches=args, null=null, **run), stage="timing")
        t_flag = time.perf_counter()
        enqueue_ms = (t_flag - t0) * 1e3
    samples: list = []
    shapes: list = []
    sampled: list[int] = []
    pos_seed = draw()
    if not null:
        samples, shapes, sampled = _read(child, reply, n, pos_seed, policy, max_numel)
    t1 = time.perf_counter()
    cpu1, w1 = sched_ns(child.pid)
    _, hw1 = thread_sched_ns()
    busy = (cpu1 - cpu0) + (w1 - w0)
    wall_ns = (t1 - t0) * 1e9
    child_ms = float(sum(reply.child_ms)) if reply.child_ms else None
    ph = Phase((t1 - t0) * 1e3, (t1 - t_flag) * 1e3, enqueue_ms, None if gated else child_ms, gated, blocked,
               (w1 - w0) / busy if busy > 0 else 0.0, samples, shapes, pos_seed, reply.outputs, sampled,
               list(reply.violations), harness_wait_fraction=(hw1 - hw0) / wall_ns if wall_ns > 0 else 0.0,
               flag_ms=(t_flag - t0) * 1e3, write_ms=write_ms, null=null, args=args)
    if gated:  # the child's clock in this reply is of its previous gated phase: it goes there
        prev = getattr(child, "last_gated_phase", None)
        if prev is not None and child_ms is not None:
            prev.child_ms = child_ms
        child.last_gated_phase = ph  # type: ignore[attr-defined]
    return ph


@dataclass
class ReferenceTiming:
    """The reference's child for one problem and its calibration."""

    child: Child
    n: int
    max_numel: int
    null_min_ms: float = 0.0  # plain clock: min over null phases (a Run without forwards), a lower bound
    null_flag_min_ms: float = 0.0  # gated clock: min over null phases of gate opened -> flag seen
    enqueue_null_min_ms: float = 0.0  # the CPU cost of a gated Run without forwards
    read_min_ms: float = 0.0  # plain clock: min over the reference's sample reads (trusted code)
    read_max_ms: float = 0.0  # gated clock: the most the reference's sample reads and input writes took in any
    write_max_ms: float = 0.0  # phase; a candidate phase's beyond these is charged to it (its GPU work outside the gate)
    alone_ms: list = field(default_factory=list)  # raw stand-alone phases of the reference
    standalone_ms: float = 0.0
    memory: dict = field(default_factory=dict)
    device_name: str = ""
    precision: dict = field(default_factory=dict)
    compile_error: str | None = None
    calibration: dict = field(default_factory=dict)
    launches: int | None = None
    call: launches.CallProfile | None = None  # type: ignore[name-defined]  # the reference's forward, profiled in the harness
    child_call: CallProfile | None = None  # the same, profiled in the reference's child
    gated: bool = False
    tampered: bool = False  # a sampled timed output differed from the truth: never kept for another candidate
    truth_checks: int = 0  # of this candidate's timing: sampled timed outputs checked against the truth
    truth_ms: float = 0.0  # and the harness's time for them (outside the clock)
    truth_skipped: int = 0  # of them, skipped: the truth did not fit in memory next to the ring

    @property
    def overhead_ms(self) -> float:
        return self.null_flag_min_ms if self.gated else self.null_min_ms + self.read_min_ms

    def net_ms(self, ph: Phase, n: int, null_flag_min: float | None = None, null_min: float | None = None,
               charged: bool = False) -> float:
        """A phase's time per forward on the harness's clock, less the fixed cost calibrated on trusted work.

        Gated: gate opened -> flag seen, less the null latency; for a ``charged`` (untrusted) phase, plus
        whatever the harness's own input write and sample read took beyond the most they took next to
        the reference in any phase (the time-sliced GPU was busy with the child's work then: counted as
        the child's). The reference is trusted code: its own write and read jitter is never charged, and
        every one of its phases widens the envelope. Plain: the phase less the null phase and the
        reference's fastest sample read."""
        if ph.gated:
            fm = self.null_flag_min_ms if null_flag_min is None else null_flag_min
            return max(ph.flag_ms - fm + (self.excess_ms(ph) if charged else 0.0), 0.0) / n
        nm = self.null_min_ms if null_min is None else null_min
        return max(ph.wall_ms - nm - self.read_min_ms, 0.0) / n

    def excess_ms(self, ph: Phase) -> float:
        """A gated phase's input write and sample read beyond the reference's most (0 for a plain phase)."""
        if not ph.gated:
            return 0.0
        return max(0.0, ph.read_ms - self.read_max_ms) + max(0.0, ph.write_ms - self.write_max_ms)

    def widen(self, ph: Phase) -> None:
        """A trusted phase of the reference: its write and read set the envelope beyond which a phase is charged."""
        if ph.gated and not ph.null:
            self.read_max_ms = max(self.read_max_ms, ph.read_ms)
            self.write_max_ms = max(self.write_max_ms, ph.write_ms)

    def close(self) -> None:
        self.child.goodbye()
        self.child.close()


def fresh_sets(ref: ReferenceRun, key: str, n: int) -> list[list]:
    seed = ref.seeds.draw(key)
    return [inp.phase_inputs(ref.problem, inp.mix(seed, k), ref.device, ref.signed, ref.drawn) for k in range(n)]


def place(ref: ReferenceRun, sets: list[list], children: list[Child], write: bool = True,
          layout: list[list] | None = None) -> list[list]:
    """Write input sets into the ring (growing it, and re-mapping it in the children, if needed).

    ``write=False``: only where they will go (a gated phase writes them once the child is frozen);
    ``layout``: write them where an earlier call said."""
    need = sum(shared.inputs_bytes(s) for s in sets) + 4096
    ring = ref.ensure_ring(need)
    for c in children:
        if c.ring_generation != ring.generation:
            c.request(P.MapRing(seq=0, ring=ring.spec), stage="map ring")
            c.ring_generation = ring.generation
    return ring.place(sets, layout=layout, write=write)[0]


def _memory_budget(ref: ReferenceRun) -> int:
    import torch

    if ref.device.startswith("cuda"):
        dev = torch.device(ref.device)
        free, _ = torch.cuda.mem_get_info(dev)
        cached = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)  # the harness's to reuse
        return int((free + max(0, cached)) * 0.4)
    return int(ref.options.cpu_budget_bytes)


RING_SLACK = 1.25  # ``ReferenceRun.ensure_ring`` allocates this multiple of what it is asked for


def timing_bytes(n: int, per_set: int, out_bytes: int, gated: bool) -> int:
    """Device memory the timing of ``n`` forwards per phase holds at its peak (harness and children).

    Per forward: its inputs in the ring (``RING_SLACK``), the harness's copy of them (``fresh_sets``),
    the staged copy a gated phase commits, and both children's kept outputs. Once: the input set
    being drawn (``inputs.draw`` makes one tensor at a time, its sign in chunks)."""
    per = int(RING_SLACK * per_set) + per_set + (per_set if gated else 0) + 2 * out_bytes
    return n * per + per_set + 4096


def memory_iters(budget: int, per_set: int, out_bytes: int, gated: bool) -> int:
    """The most forwards per phase whose ``timing_bytes`` fit ``budget``: at least 1 (one input set, the
    least timing can hold), however little is free."""
    per = timing_bytes(1, per_set, out_bytes, gated) - timing_bytes(0, per_set, out_bytes, gated)
    return max(1, (budget - timing_bytes(0, per_set, out_bytes, gated)) // max(1, per))


def _queue_limit(policy: tm.Policy, *launch_counts: int | None) -> int | None:
    """Forwards a gated phase can queue: the launch budget over the most launches per forward."""
    known = [c for c in launch_counts if c]
    if not known:
        return None
    return max(1, policy.max_queued_launches // max(known))


def start_reference(ref: ReferenceRun, max_numel: int, others: list[Child],
                    say: Callable[[str], None]) -> ReferenceTiming:
    """Start the reference child, measure its memory, choose ``n``, calibrate overhead and speed."""
    policy = ref.policy
    child = Child(job_for(ref, "reference", f"{ref.name}.reference.log"), ref.options.reference_timeout)
    rt = ReferenceTiming(child, 1, max_numel, device_name=child.ready.device_name,
                         precision=dict(child.ready.precision), gated=bool(ref.clock and child.ready.gated))
    try:
        one = fresh_sets(ref, "ref.memory", 1)
        args = place(ref, one, [child, *others])
        mem = child.request(P.Memory(seq=0, args=args[0]), stage="reference memory")
        rt.memory = {"peak_bytes": mem.peak_bytes, "method": mem.method, "free_bytes": mem.free_bytes}
        # profiled in the harness (trusted code, one profiler for the whole run), on the same inputs
        rt.call = launches.profile_call(ref.model, shared.view_all(ref.ring, args[0]), ref.device.startswith("cuda"))  # type: ignore[arg-type]
        rt.launches = rt.call.launches
        # and in the reference's child, the process that is timed, as the candidate's child profiles itself
        la = child.request(P.Launches(seq=0, args=args[0]), stage="profiling the reference's call in its child")
        rt.child_call = launches.CallProfile(la.count, la.method, la.kernel_us, la.syncs, la.d2h_bytes,
                                             tuple(tuple(k) for k in la.top_kernels))
        if ref.options.vs_compile:
            done = child.request(P.Compile(seq=0, args=args[0]), stage="torch.compile of the reference",
                                 timeout=ref.options.reference_timeout)
            rt.compile_error = done.error
        per_set = shared.inputs_bytes(one[0])
        del one, args  # the memory set is not kept through the timing
        out_bytes = ref.estimate.outputs_bytes if ref.estimate else per_set
        budget = _memory_budget(ref)
        n_mem = memory_iters(budget, per_set, out_bytes, rt.gated)
        rt.calibration["memory_budget_bytes"] = budget
        rt.calibration["memory_bytes_at_iters"] = timing_bytes(n_mem, per_set, out_bytes, rt.gated)
        n_queue = _queue_limit(policy, rt.launches) if rt.gated else None
        est = None
        n = 1
        for _ in range(2):  # warm up, then choose n from the reference's own time (trusted code)
            ph = run_phase(child, ref, fresh_sets(ref, "ref.probe", n), {"tf32": True}, _drawer(ref, "probe"), policy,
                           max_numel, others)
            est = max(ph.wall_ms - ph.read_ms, 1e-3) / n
            n = tm.iterations(est, policy.target_phase_ms, policy.max_iters, n_mem, n_queue)
        while True:  # a gated enqueue that blocks: the queue is full (fewer per phase) or the forward syncs
            sets = fresh_sets(ref, "ref.calibration", n)
            cal: list[Phase] = []
            nulls: list[Phase] = []
            plain_nulls: list[Phase] = []
            for i in range(policy.calibration_phases):
                nulls.append(run_phase(child, ref, sets, {"tf32": True}, _drawer(ref, "null"), policy, max_numel,
                                       others, null=True, gated=rt.gated))
                if rt.gated:  # the plain clock's fixed cost too (a candidate that syncs is timed plain)
                    plain_nulls.append(run_phase(child, ref, sets, {"tf32": True}, _drawer(ref, "pnull"), policy,
                                                 max_numel, others, null=True, gated=False))
                cal.append(run_phase(child, ref, sets, {"tf32": True}, _drawer(ref, "calibration"), policy,
                                     max_numel, others, gated=rt.gated))
            if not any(p.blocked for p in cal):
                break
            if n == 1:
                rt.gated = False  # the reference itself waits on the GPU: every arm runs plain phases
                rt.calibration["reference_blocked"] = True
            else:
                n = max(1, n // 2)
        rt.n = n
        pn = plain_nulls or [p for p in nulls if not p.gated]
        rt.null_min_ms = min((p.wall_ms for p in pn), default=0.0)
        rt.null_flag_min_ms = min((p.flag_ms for p in nulls if p.gated), default=0.0)
        rt.enqueue_null_min_ms = min((p.enqueue_ms for p in nulls), default=0.0)
        rt.read_min_ms = min(p.read_ms for p in cal)
        rt.read_max_ms = max(p.read_ms for p in cal)
        rt.write_max_ms = max(p.write_ms for p in cal)
        rt.alone_ms = [rt.net_ms(p, n) for p in cal]
        rt.standalone_ms = statistics.median(rt.alone_ms)
        rt.calibration = {**rt.calibration, "null_phase_ms": [p.wall_ms for p in pn],
                          "null_flag_ms": [p.flag_ms for p in nulls if p.gated],
                          "null_enqueue_ms": [p.enqueue_ms for p in nulls], "sample_read_ms": [p.read_ms for p in cal],
                          "input_write_ms": [p.write_ms for p in cal], "phase_ms": [p.wall_ms for p in cal],
                          "flag_ms": [p.flag_ms for p in cal], "iters": n, "estimate_ms_per_iter": est, "memory_limit_iters": n_mem,
                          "queue_limit_iters": n_queue, "clock": "gated" if rt.gated else "plain"}
        if ref.clock is not None and not child.ready.gated:
            rt.calibration["gate_unavailable"] = child.ready.clock_error
        say(f"{ref.name}: reference timed alone at {rt.standalone_ms:.4g} ms/forward ({n} per phase, "
            f"{'gated GPU clock' if rt.gated else 'plain clock'}, overhead {rt.overhead_ms:.3g} ms per phase)")
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


@dataclass
class Timed:
    """What timing a candidate gives: the result's ``timing`` section, its ``per_call`` section, and the
    candidate's speedup over the other reference arms (``reference_fp32``, ``reference_compile``)."""

    timing: dict
    per_call: dict
    ratios: dict[str, float]


def time_candidate(ref: ReferenceRun, cand: Child, gates: list, max_numel: int, aggs: dict,
                   say: Callable[[str], None], violations: set, cand_call: launches.CallProfile | None = None,
                   cand_free: int | None = None) -> Timed:
    """Interleaved rounds of reference and candidate: the result's ``timing`` and ``per_call`` sections."""
    policy = ref.policy
    cuda = ref.device.startswith("cuda")
    try:
        if ref.timing is not None and ref.timing.tampered:  # a fresh child, not one a candidate wrote into
            ref.timing.close()
            ref.timing = None
        if ref.timing is None:
            ref.timing = start_reference(ref, max_numel, [cand], say)
        rt = ref.timing
        rt.truth_checks, rt.truth_ms, rt.truth_skipped = 0, 0.0, 0
        n = rt.n
        if rt.gated:  # the candidate's forwards must fit the queue too (its own count: only its loss if it lies)
            cap = _queue_limit(policy, rt.launches, cand_call.launches if cand_call else None)
            n = min(n, cap) if cap else n
        plan = arms(ref, rt)
        run_of = dict(plan)
        child_of = {name: (cand if name == "candidate" else rt.child) for name, _ in plan}
        others = {rt.child.pid: [cand], cand.pid: [rt.child]}
        gated_arm = {name: rt.gated for name, _ in plan}
        phases: dict[str, list[Phase]] = {name: [] for name, _ in plan}
        waits: dict[str, list[float]] = {"reference": [], "candidate": [], "harness": []}
        cand_nulls: list[Phase] = []
        last_wall: dict[int, float] = {}

        def one(name: str, sets: list[list], key: str) -> Phase:
            c = child_of[name]
            ph = run_phase(c, ref, sets, run_of[name], _drawer(ref, key), policy, max_numel, others[c.pid],
                           gated=gated_arm[name])
            if ph.blocked:  # it waited on the GPU inside its enqueue: time it as it runs, serialised
                gated_arm[name] = False
            if name == "candidate":
                violations.update(ph.violations)
                _check_inputs(ref, ph, sets, aggs["no_input_mutation"])
                prev = last_wall.get(c.pid)
                claimed = ph.child_ms
                wall = prev if ph.gated else ph.wall_ms  # gated: the child's clock is of its previous phase
                if claimed is not None and wall is not None:
                    bad = tm.cross_check(wall, claimed)
                    aggs["timer_consistency"].record(bad is None, (bad + ": its clock or its messages were "
                                                                   "tampered with") if bad else
                                                     "the child's own clock agrees with the harness's")
                last_wall[c.pid] = ph.wall_ms
            return ph

        for name, _ in plan:  # warm-up phase of every arm (a blocked candidate is found here)
            wsets = fresh_sets(ref, f"warmup.{name}", n)
            ph = one(name, wsets, f"warmup.{name}")
            if name == "reference_tf32":
                bad = _reference_truth(ref, rt, ph, wsets, gates, policy, "warmup")
                rt.tampered = bad is not None
                if bad:  # before this candidate's timing: an earlier candidate sharing the child, or its trials
                    raise ChildFailed(f"the reference's warm-up timed output differs from the truth ({bad}) before "
                                      f"the candidate was timed: the reference was tampered with")
            if name == "candidate" and ph.blocked:
                # a full queue (fewer forwards per phase do) or a host synchronisation (even one blocks)
                m = n
                while m > 1:
                    m = max(1, m // 4)
                    gated_arm[name] = True
                    if not one(name, fresh_sets(ref, f"warmup.q{m}", m), f"warmup.q{m}").blocked:
                        break
                if gated_arm[name] and m < n:
                    n = m  # every arm at the candidate's queue depth, so rounds share their inputs
                else:
                    gated_arm[name] = False
                    one(name, fresh_sets(ref, f"warmup2.{name}", n), f"warmup2.{name}")
        current: dict[str, Any] = {}

        def measure(name: str, r: int) -> float:
            if "sets" not in current or current["round"] != r:
                current.clear()  # the last round's inputs go before this round's are drawn
                current.update(round=r, sets=fresh_sets(ref, f"round{r}", n), phases={})
            ph = one(name, current["sets"], f"positions{r}.{name}")
            current["phases"][name] = ph
            phases[name].append(ph)
            waits["candidate" if name == "candidate" else "reference"].append(ph.wait_fraction)
            waits["harness"].append(ph.harness_wait_fraction)
            if name == "reference_tf32":
                rt.read_min_ms = min(rt.read_min_ms, ph.read_ms)
            if name != "candidate":
                rt.widen(ph)
            got = current["phases"]
            if name in ("reference_tf32", "candidate") and {"reference_tf32", "candidate"} <= set(got):
                # now, while the reference's outputs of this round are still in its process
                _compare_round(rt.child, got["reference_tf32"], got["candidate"], gates, policy,
                               aggs["timed_outputs"], r)
            return ph  # type: ignore[return-value]

        def after_round(r: int, _values: dict) -> bool:
            sets = current["sets"]
            # the reference's sampled timed output of this round against the truth, once both arms are timed:
            # the truth's forward runs between rounds, before an arm that alternates, not before the reference only
            rph = current["phases"].get("reference_tf32")
            bad = _reference_truth(ref, rt, rph, sets, gates, policy, f"truth{r}") if rph is not None else None
            rt.tampered = rt.tampered or bad is not None
            if bad:  # the candidate is the only other code running while it is timed
                aggs["containment"].record(False, f"round {r}: the reference's timed output differs from the "
                                                  f"truth ({bad}): the reference was tampered with")
            # a null phase of each child every round: the clock's fixed cost follows the machine
            nr = run_phase(rt.child, ref, sets, {"tf32": True}, _drawer(ref, f"null{r}"), policy, max_numel,
                           others[rt.child.pid], null=True, gated=rt.gated)
            nc = run_phase(cand, ref, sets, {"tf32": True}, _drawer(ref, f"nullc{r}"), policy, max_numel,
                           others[cand.pid], null=True, gated=gated_arm["candidate"])
            if nr.gated:
                rt.null_flag_min_ms = min(rt.null_flag_min_ms, nr.flag_ms)
                rt.enqueue_null_min_ms = min(rt.enqueue_null_min_ms, nr.enqueue_ms)
            else:
                rt.null_min_ms = min(rt.null_min_ms, nr.wall_ms)
            cand_nulls.append(nc)
            return aggs["timed_outputs"].passed and aggs["timer_consistency"].passed and aggs["containment"].passed

        def mins() -> tuple[float, float]:
            # a lower bound from trusted work and from every child's null phases (a child can only raise its own)
            f = min([rt.null_flag_min_ms, *[p.flag_ms for p in cand_nulls if p.gated]])
            w = min([rt.null_min_ms, *[p.wall_ms for p in cand_nulls if not p.gated]])
            return f, w

        def net(name: str, ph: Phase) -> float:
            f, w = mins()
            return rt.net_ms(ph, n, f, w, charged=name == "candidate")

        rounds = interleave_rounds([nm for nm, _ in plan], lambda name, r: net(name, measure(name, r)),  # type: ignore[arg-type]
                                   policy.round_policy(cuda), pair=("reference_tf32", "candidate"),
                                   on_round=after_round)
    except HarnessOOM:
        raise
    except (ChildFailed, Tampering):
        raise
    except Exception as e:
        if is_oom(e):
            raise HarnessOOM(f"out of memory in the harness while timing: {e}"[:300]) from None
        raise
    flag_min, null_min = mins()
    per = {name: [rt.net_ms(p, n, flag_min, null_min, charged=name == "candidate") for p in ps]
           for name, ps in phases.items()}
    overhead = flag_min if rt.gated else null_min + rt.read_min_ms
    drift = (statistics.median(per["reference_tf32"]) / rt.standalone_ms
             if per["reference_tf32"] and rt.standalone_ms > 0 else None)  # 0: too fast to time alone
    judged = tm.judge(per["reference_tf32"], per["candidate"], policy,
                      {k: statistics.median(v) for k, v in waits.items() if v}, drift)
    clocks = {name: [p.child_ms for p in ps if p.child_ms is not None] for name, ps in phases.items()}
    out = {"method": "harness_clock", "clock": "gated" if rt.gated else "plain", "unit": "ms",
           "rounds": len(per["candidate"]), "rounds_stop": rounds.stop, "iters_per_phase": n,
           "warmup_phases": 1, "overhead_ms": overhead, "null_min_ms": null_min, "null_flag_min_ms": flag_min,
           "read_min_ms": rt.read_min_ms, "read_max_ms": rt.read_max_ms, "write_max_ms": rt.write_max_ms,
           "charged_excess_ms": statistics.median(rt.excess_ms(p) for p in phases["candidate"])
           if phases["candidate"] and phases["candidate"][0].gated else 0.0,
           "ci_method": "median of per-round ratios, 95% interval from order statistics (distribution-free)",
           "speedup_estimate": judged.speedup, "speedup_ci": list(judged.ci) if judged.ci else None,
           "ci_coverage": judged.coverage, "inconclusive": judged.reasons,
           "reference_standalone_ms": rt.standalone_ms, "reference_drift": drift,
           "wait_fraction": {k: statistics.median(v) for k, v in waits.items() if v},
           "child_clock_ms": {k: statistics.median(v) / n for k, v in clocks.items() if v},
           "candidate_clock": "gated" if gated_arm["candidate"] else "plain",
           "reference_truth": {"checks": rt.truth_checks, "skipped": rt.truth_skipped, "harness_ms": rt.truth_ms,
                               "method": "one sampled timed iteration of the reference per phase (warm-up and "
                                         "every round) against the harness's truth, outside the clock"},
           "candidate_blocked": rt.gated and not gated_arm["candidate"],
           "overhead_share": overhead / statistics.median([p.wall_ms for p in phases["reference_tf32"]])
           if phases["reference_tf32"] else None,
           "calibration": {**rt.calibration, "candidate_null_phase_ms": [p.wall_ms for p in cand_nulls],
                           "candidate_null_flag_ms": [p.flag_ms for p in cand_nulls if p.gated]}}
    for name, _ in plan:
        out[name] = tm.stats(per[name])
        out[f"{name}_per_round"] = per[name]
    per_call = _per_call(rt, phases, [p.enqueue_ms for p in cand_nulls if p.gated], n, cand_call, gated_arm,
                         cand_free)
    ratios = {}
    for name in ("reference_fp32", "reference_compile"):
        if per.get(name):
            ratios[name] = statistics.median([a / b for a, b in zip(per[name], per["candidate"]) if a > 0 and b > 0]
                                             or [float("nan")])
    return Timed(out, per_call, ratios)


def _kernels(prof: launches.CallProfile | None) -> list[dict]:
    return [{"name": name, "us": us, "calls": k} for name, us, k in prof.top_kernels] if prof else []


def _per_call(rt: ReferenceTiming, phases: dict[str, list[Phase]], cand_null_enq: list[float], n: int,
              cand_call: launches.CallProfile | None, gated_arm: dict[str, bool], cand_free: int | None = None) -> dict:
    """What one call costs besides its device time: CPU per call unprofiled, launches, host syncs, bytes to host.

    ``call_us``: a gated phase's enqueue on the harness's clock, less the fixed cost of a Run without
    forwards (min over both children's null phases), per forward: the CPU time of one call when it
    never waits for the GPU, describing its outputs included (a few us per output tensor)."""
    enq_null = min([rt.enqueue_null_min_ms, *cand_null_enq]) if cand_null_enq else rt.enqueue_null_min_ms

    def side(name: str, prof: launches.CallProfile | None, gated: bool) -> dict:
        ps = phases.get(name) or []
        d: dict = {"launches": prof.launches if prof else None, "kernel_us": prof.kernel_us if prof else None,
                   "syncs": prof.syncs if prof else None, "d2h_bytes": prof.d2h_bytes if prof else None,
                   "call_us": None, "call_us_method": None}
        if ps and gated and all(p.gated and not p.blocked for p in ps):
            d["call_us"] = max(statistics.median(p.enqueue_ms for p in ps) - enq_null, 0.0) * 1e3 / n
            d["call_us_method"] = "gated enqueue on the harness's clock, less a null Run, per forward (unprofiled)"
        elif ps and prof is not None and prof.kernel_us is not None:
            serial = statistics.median(rt.net_ms(p, n) for p in ps) * 1e3
            d["call_us"] = max(serial - prof.kernel_us, 0.0)
            d["call_us_method"] = ("serialised forward on the harness's clock less the profiler's kernel time "
                                   "(the call waits on the GPU: its CPU time cannot be timed apart)")
        return d

    method = rt.call.method if rt.call is not None else "not measured"
    ref_side = side("reference_tf32", rt.call, rt.gated)
    ref_side["top_kernels"] = _kernels(rt.call)  # in the harness
    ref_side["child"] = {"kernel_us": rt.child_call.kernel_us if rt.child_call else None,
                         "launches": rt.child_call.launches if rt.child_call else None,
                         "top_kernels": _kernels(rt.child_call), "free_bytes_at_warmup": rt.memory.get("free_bytes")}
    cand_side = side("candidate", cand_call, gated_arm.get("candidate", False))
    cand_side["top_kernels"] = _kernels(cand_call)  # in its child
    cand_side["free_bytes_at_warmup"] = cand_free
    return {"reference": ref_side, "candidate": cand_side,
            "method": f"launches, kernel_us, syncs, d2h_bytes: {method}; reference: profiled in the harness, "
                      f"reference.child: in the reference's timed child; candidate: in its child; top_kernels: the "
                      f"{launches.TOP_KERNELS} kernels (CPU: aten ops, by count) with the most time per forward"}


def _check_inputs(ref: ReferenceRun, ph: Phase, sets: list[list], agg: Any) -> None:
    """The ring's inputs of a timed phase's sampled iterations, after it, equal what the harness wrote
    (outside the clock): a candidate that computes in place on its inputs fails as it does in a trial."""
    import torch

    for k in ph.sampled:
        for i, (a, x) in enumerate(zip(ph.args[k], sets[k])):
            if isinstance(a, P.RingTensor) and not torch.equal(shared.view(ref.ring.buf, a), x):  # type: ignore[union-attr]
                agg.record(False, f"timed iteration {k}: input {i} was changed by the candidate while timed")
                return
    agg.record(True, "the inputs of every sampled timed iteration are unchanged after its phase")


def _drawer(ref: ReferenceRun, key: str) -> Callable[[], int]:
    return lambda: ref.seeds.draw(key)


def _reference_truth(ref: ReferenceRun, rt: ReferenceTiming, ph: Phase, sets: list[list], gates: list,
                     policy: tm.Policy, key: str) -> str | None:
    """One of the reference's sampled timed iterations (drawn after it answered) against the truth the
    harness computes on that input set (``timed_truth``), at the positions already read: None when it
    is within the trial gates (relative L2, and ``TIMED_SLACK`` x the per-element gate), else why not.

    The reference's child is the process the candidate's outputs are compared with while timed; the
    candidate runs next to it, and a write into it (its weights, its outputs) changes what the timed
    outputs are compared with. The harness's own model is out of the candidate's reach."""
    import math
    import random

    import torch

    if not ph.sampled:
        return None
    t0 = time.perf_counter()
    at = random.Random(ref.seeds.draw(key)).randrange(len(ph.sampled))
    k = ph.sampled[at]
    try:
        truth = timed_truth(ref, sets[k])
        if truth is None:
            rt.truth_skipped += 1
            return None
        if len(truth) != len(ph.samples[at]):
            return f"timed iteration {k}: {len(ph.samples[at])} output(s), the truth has {len(truth)}"
        for j, (rv, t) in enumerate(zip(ph.samples[at], truth)):
            if tuple(t.shape) != ph.shapes[at][j][1]:
                return f"timed iteration {k}, output {j}: shape {ph.shapes[at][j][1]}, the truth's {tuple(t.shape)}"
            pos = _positions(ph.pos_seed, k, j, t.numel(), policy.samples_per_output)
            tv = t.reshape(-1)[torch.as_tensor(pos, device=t.device)].cpu()
            g = gates[j] if j < len(gates) else None
            if g is None or ck.is_exact_dtype(t.dtype):
                # a tie broken otherwise in another process flips an element; a written reference is off throughout
                n_bad = int((rv != tv.to(rv.dtype)).sum())
                if n_bad > max(1, tv.numel() // 10):
                    return f"timed iteration {k}, output {j}: {n_bad} of {tv.numel()} sampled elements differ"
                continue
            rms = ck.rms(t)
            rd, td = rv.to(torch.float64), tv.to(torch.float64)
            m = torch.isfinite(rd) & torch.isfinite(td)  # non-finite: the fp32 reference may overflow honestly
            if rms <= 0 or not bool(m.any()):
                continue
            d = rd[m] - td[m]
            rel = math.sqrt(float((d * d).sum()) / int(m.sum())) / rms
            elem = float((d.abs() / (td[m].abs() + rms)).max())
            if rel > g.rel_l2 or elem > ck.TIMED_SLACK * g.elem:
                return (f"timed iteration {k}, output {j}: sampled relative L2 error {rel:.2e} (gate {g.rel_l2:.2e}), "
                        f"element error {elem:.2e} (gate {ck.TIMED_SLACK * g.elem:.2e})")
        return None
    finally:
        rt.truth_checks += 1
        rt.truth_ms += (time.perf_counter() - t0) * 1e3


def _compare_round(ref_child: Child, ref_ph: Phase, cand_ph: Phase, gates: list, policy: tm.Policy, agg: Any,
                   r: int) -> None:
    """Every timed iteration's samples must match the reference's at the same positions.

    The reference's outputs of this round are still in its (frozen) process: they are read at
    the positions the candidate's samples were taken at, drawn after the candidate answered.
    """
    import math

    pooled: dict[int, tuple[float, int]] = {}  # output j: (sum of squared errors / rms^2, count) over the iterations
    for k, crow in zip(cand_ph.sampled, cand_ph.samples):
        rrow = ref_ph.outputs[k]
        rshape = [(o.dtype, tuple(o.shape)) for o in rrow if not isinstance(o, P.Opaque)]
        cshape = cand_ph.shapes[cand_ph.sampled.index(k)]
        if rshape != cshape:
            agg.record(False, f"round {r}, timed iteration {k}: outputs {cshape}, the reference's {rshape}")
            return
        items = [(rout, _positions(cand_ph.pos_seed, k, j, math.prod(rout.shape), policy.samples_per_output))
                 for j, rout in enumerate(rrow)]
        rvals = shared.gather_samples(ref_child, items, ref_child.job.device)
        for j, (cv, rv, rout) in enumerate(zip(crow, rvals, rrow)):
            g = gates[j] if j < len(gates) else None
            rms = ck.rms(shared.read_full(ref_child, rout, ref_child.job.device))
            ok, detail = ck.samples_match(cv, rv, g, rms)
            if not ok:
                agg.record(False, f"round {r}, timed iteration {k}, output {j}: {detail} (a stale, cached, "
                                  f"skipped or unfinished output while timed)")
                return
            if g is not None:
                sq, cnt = ck.samples_sq_error(cv, rv, rms)
                s0, c0 = pooled.get(j, (0.0, 0))
                pooled[j] = (s0 + sq, c0 + cnt)
    for j, (sq, cnt) in sorted(pooled.items()):
        ok, detail = ck.samples_rel_l2_match(sq, cnt, gates[j] if j < len(gates) else None)
        if not ok:
            agg.record(False, f"round {r}, output {j}: {detail} (less precise while timed than in its trials)")
            return
    agg.record(True, f"timed outputs match the reference's at iterations and positions drawn after the child "
                     f"answered (up to {policy.sampled_iterations} iterations x {policy.samples_per_output} "
                     f"elements per phase), per element and in relative L2")
