"""The reference's timed child for one problem (``ReferenceTiming``): started when a candidate first
reaches timing and kept for the problem's other candidates; it fixes ``n`` and calibrates the overheads
(null phases, sample reads), the reference's stand-alone time and its CPU time per forward."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from headroom.verify import capture, launches, shared
from headroom.verify import protocol as P
from headroom.verify import timing as tm
from headroom.verify.launches import CallProfile
from headroom.verify.phase import Phase, _drawer, fresh_sets, place, run_phase
from headroom.verify.process import Child
from headroom.verify.reference import ReferenceRun, job_for


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
    # gated clock: the most the reference's sample reads and input writes took in any phase; a candidate
    # phase's beyond these is charged to it (its GPU work outside the gate)
    read_max_ms: float = 0.0
    write_max_ms: float = 0.0
    alone_ms: list = field(default_factory=list)  # raw stand-alone phases of the reference
    standalone_ms: float = 0.0
    cpu_alone_ms: float | None = None  # plain clock: the reference's CPU time per forward in its calibration
    memory: dict = field(default_factory=dict)
    device_name: str = ""
    precision: dict = field(default_factory=dict)
    compile_error: str | None = None
    capture: Any = None  # capture.Outcome of the reference's child with ``--graphs`` (None: not checked)
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

    def net_ms(
        self,
        ph: Phase,
        n: int,
        null_flag_min: float | None = None,
        null_min: float | None = None,
        charged: bool = False,
    ) -> float:
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


def start_reference(
    ref: ReferenceRun, max_numel: int, others: list[Child], say: Callable[[str], None]
) -> ReferenceTiming:
    """Start the reference child, measure its memory, choose ``n``, calibrate overhead and speed."""
    policy = ref.policy
    child = Child(job_for(ref, "reference", f"{ref.name}.reference.log"), ref.options.reference_timeout)
    rt = ReferenceTiming(
        child,
        1,
        max_numel,
        device_name=child.ready.device_name,
        precision=dict(child.ready.precision),
        gated=bool(ref.clock and child.ready.gated),
    )
    try:
        per_set = _measure_call(ref, rt, child, others)
        out_bytes = ref.estimate.outputs_bytes if ref.estimate else per_set
        budget = _memory_budget(ref)
        n_mem = memory_iters(budget, per_set, out_bytes, rt.gated)
        rt.calibration["memory_budget_bytes"] = budget
        rt.calibration["memory_bytes_at_iters"] = timing_bytes(n_mem, per_set, out_bytes, rt.gated)
        n_queue = _queue_limit(policy, rt.launches) if rt.gated else None
        est = None
        n = 1
        for _ in range(2):  # warm up, then choose n from the reference's own time (trusted code)
            ph = run_phase(
                child,
                ref,
                fresh_sets(ref, "ref.probe", n),
                {"tf32": True},
                _drawer(ref, "probe"),
                policy,
                max_numel,
                others,
            )
            est = max(ph.wall_ms - ph.read_ms, 1e-3) / n
            n = tm.iterations(est, policy.target_phase_ms, policy.max_iters, n_mem, n_queue)
        _calibrate(ref, rt, child, others, max_numel, n, est, n_mem, n_queue)
        say(
            f"{ref.name}: reference timed alone at {rt.standalone_ms:.4g} ms/forward ({rt.n} per phase, "
            f"{'gated GPU clock' if rt.gated else 'plain clock'}, overhead {rt.overhead_ms:.3g} ms per phase)"
        )
    except BaseException:
        child.close()
        raise
    return rt


def _measure_call(ref: ReferenceRun, rt: ReferenceTiming, child: Child, others: list[Child]) -> int:
    """The reference child's memory measurement and call profiles (and its ``torch.compile`` with
    ``--vs-compile``, its capture in a CUDA graph with ``--graphs``), on one input set; returns that set's bytes."""
    one = fresh_sets(ref, "ref.memory", 1)
    args = place(ref, one, [child, *others])
    mem = child.request(P.Memory(seq=0, args=args[0]), stage="reference memory")
    rt.memory = {"peak_bytes": mem.peak_bytes, "method": mem.method, "free_bytes": mem.free_bytes}
    # profiled in the harness (trusted code, one profiler for the whole run), on the same inputs
    rt.call = launches.profile_call(ref.model, shared.view_all(ref.ring, args[0]), ref.device.startswith("cuda"))
    rt.launches = rt.call.launches
    # and in the reference's child, the process that is timed, as the candidate's child profiles itself
    la = child.request(P.Launches(seq=0, args=args[0]), stage="profiling the reference's call in its child")
    rt.child_call = launches.CallProfile(
        la.count, la.method, la.kernel_us, la.syncs, la.d2h_bytes, tuple(tuple(k) for k in la.top_kernels)
    )
    if ref.options.vs_compile:
        done = child.request(
            P.Compile(seq=0, args=args[0]),
            stage="torch.compile of the reference",
            timeout=ref.options.reference_timeout,
        )
        rt.compile_error = done.error
    if ref.options.graphs:  # once per reference child: it is kept for the problem's other candidates
        rt.capture = capture.check(ref, child, rt.max_numel, "the reference", others)
    per_set = shared.inputs_bytes(one[0])
    del one, args  # the memory set is not kept through the timing
    return per_set


def _calibrate(
    ref: ReferenceRun,
    rt: ReferenceTiming,
    child: Child,
    others: list[Child],
    max_numel: int,
    n: int,
    est: float | None,
    n_mem: int,
    n_queue: int | None,
) -> None:
    """The reference timed alone: null and calibration phases at ``n`` forwards (fewer where a gated
    enqueue blocks), the clock's fixed costs and the standalone time into ``rt``."""
    while True:  # a gated enqueue that blocks: the queue is full (fewer per phase) or the forward syncs
        cal, nulls, plain_nulls = _calibration_phases(ref, rt, child, others, max_numel, n)
        if not any(p.blocked for p in cal):
            break
        if n == 1:
            rt.gated = False  # the reference itself waits on the GPU: every arm runs plain phases
            rt.calibration["reference_blocked"] = True
        else:
            n = max(1, n // 2)
    pn = plain_nulls or [p for p in nulls if not p.gated]
    _fixed_costs(rt, n, cal, nulls, pn)
    rt.calibration = {
        **rt.calibration,
        "null_phase_ms": [p.wall_ms for p in pn],
        "null_flag_ms": [p.flag_ms for p in nulls if p.gated],
        "null_enqueue_ms": [p.enqueue_ms for p in nulls],
        "sample_read_ms": [p.read_ms for p in cal],
        "input_write_ms": [p.write_ms for p in cal],
        "phase_ms": [p.wall_ms for p in cal],
        "flag_ms": [p.flag_ms for p in cal],
        "iters": n,
        "estimate_ms_per_iter": est,
        "memory_limit_iters": n_mem,
        "queue_limit_iters": n_queue,
        "clock": "gated" if rt.gated else "plain",
    }
    if ref.clock is not None and not child.ready.gated:
        rt.calibration["gate_unavailable"] = child.ready.clock_error


def _calibration_phases(
    ref: ReferenceRun, rt: ReferenceTiming, child: Child, others: list[Child], max_numel: int, n: int
) -> tuple[list[Phase], list[Phase], list[Phase]]:
    """One calibration at ``n`` forwards per phase, on one draw of input sets: (calibration phases, null
    phases, plain null phases), ``policy.calibration_phases`` of each, interleaved."""
    policy = ref.policy
    sets = fresh_sets(ref, "ref.calibration", n)
    cal: list[Phase] = []
    nulls: list[Phase] = []
    plain_nulls: list[Phase] = []

    def phase(key: str, **kw: Any) -> Phase:
        return run_phase(child, ref, sets, {"tf32": True}, _drawer(ref, key), policy, max_numel, others, **kw)

    for _ in range(policy.calibration_phases):
        nulls.append(phase("null", null=True, gated=rt.gated))
        if rt.gated:  # the plain clock's fixed cost too (a candidate that syncs is timed plain)
            plain_nulls.append(phase("pnull", null=True, gated=False))
        cal.append(phase("calibration", gated=rt.gated))
    return cal, nulls, plain_nulls


def _fixed_costs(rt: ReferenceTiming, n: int, cal: list[Phase], nulls: list[Phase], plain: list[Phase]) -> None:
    """The clock's fixed costs (null phases, ``plain``: those on the plain clock; sample reads, input writes) and
    the reference's time alone (wall and CPU per forward), from the calibration at ``n`` per phase, into ``rt``."""
    rt.n = n
    rt.null_min_ms = min((p.wall_ms for p in plain), default=0.0)
    rt.null_flag_min_ms = min((p.flag_ms for p in nulls if p.gated), default=0.0)
    rt.enqueue_null_min_ms = min((p.enqueue_ms for p in nulls), default=0.0)
    rt.read_min_ms = min(p.read_ms for p in cal)
    rt.read_max_ms = max(p.read_ms for p in cal)
    rt.write_max_ms = max(p.write_ms for p in cal)
    rt.alone_ms = [rt.net_ms(p, n) for p in cal]
    rt.standalone_ms = statistics.median(rt.alone_ms)
    cpu = [p.cpu_ms / n for p in cal if p.cpu_ms is not None]
    rt.cpu_alone_ms = statistics.median(cpu) if cpu else None
