"""One timed phase on the harness's clock (``run_phase``), where its inputs go (``place``), and how
its outputs are sampled; ``session`` runs the rounds of them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from headroom.verify import inputs as inp
from headroom.verify import protocol as P
from headroom.verify import shared
from headroom.verify import timing as tm
from headroom.verify.process import Child, ChildFailed, Tampering
from headroom.verify.procfs import sched_ns, thread_sched_ns
from headroom.verify.reference import ReferenceRun


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
    cpu_ms: float | None = None  # plain clock: the child's CPU time (its cgroup's accounting) in the phase


def _sampled_iterations(pos_seed: int, n: int, count: int) -> list[int]:
    """Which iterations of a phase are read: all of them up to ``count``, else a random subset."""
    import random

    if n <= count:
        return list(range(n))
    return sorted(random.Random(inp.mix(pos_seed, "iterations")).sample(range(n), count))


def _positions(pos_seed: int, k: int, j: int, numel: int, count: int) -> Any:
    """Flat sample positions of iteration k's output j."""
    return shared.sample_positions(numel, count, inp.mix(pos_seed, k, j))


def _read(
    child: Child, reply: Any, n: int, pos_seed: int, policy: tm.Policy, max_numel: int
) -> tuple[list, list, list]:
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
                    raise Tampering(
                        f"timed iteration {k}, output {j}: the same memory as an earlier output of "
                        f"the phase (outputs recycled while timed)"
                    )
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
        samples.append(flat[i : i + len(hrow)])
        i += len(hrow)
    return samples, shapes, sampled


def _gated_run(
    child: Child,
    ref: ReferenceRun,
    sets: list[list],
    run: dict,
    policy: tm.Policy,
    others: list[Child],
    null: bool,
    untrusted: bool,
) -> tuple:
    """A gated phase's ``Run`` (the GPU clock, ``gate``): enqueue with the gate shut, freeze the child, write
    the inputs, open the gate and wait for the flag. (args, reply, blocked, write_ms, t0, t_flag, enqueue_ms)."""
    clock = ref.clock
    assert clock is not None
    args = place(ref, sets, [child, *others], write=False)  # the inputs go in once the child is frozen
    ring = ref.ring
    assert ring is not None  # place made it
    # a null phase writes the same inputs: the GPU then switches from the harness's context (its
    # copy) to the child's inside the clock, as in a timed phase (~145 us per phase on the H200)
    staged = ring.stage(sets, args)
    if untrusted:  # it is thawed to enqueue before the inputs go in: the ring must not still hold this
        ring.scrub(staged)  # round's inputs from the reference's phase (a side stream would read them)
    token = clock.token()
    opened: list[float] = []

    def open_gate() -> None:  # the child is waiting on the GPU inside its enqueue (a host sync)
        ring.commit(staged)  # its kernels are gated: none has read the ring yet
        opened.append(time.perf_counter())
        clock.open(child.job.clock_slot, token)

    t_send = time.perf_counter()
    reply = child.request(
        P.Run(seq=0, batches=args, null=null, token=token, **run),
        stage="timing",
        freeze=False,
        first_wait=policy.enqueue_timeout_s,
        on_slow=open_gate,
    )
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
        raise ChildFailed("the GPU work of a timed phase did not finish in 60 s (during timing)", child.log_tail())
    t_flag = time.perf_counter()
    enqueue_ms = (t_reply - t_send) * 1e3
    return args, reply, blocked, write_ms, t0, t_flag, enqueue_ms


def run_phase(
    child: Child,
    ref: ReferenceRun,
    sets: list[list],
    run: dict,
    draw: Callable[[], int],
    policy: tm.Policy,
    max_numel: int,
    others: list[Child],
    null: bool = False,
    gated: bool = True,
    untrusted: bool = False,
) -> Phase:
    """One phase on the harness's clock (raises Tampering when the outputs are not readable as described).

    The sample positions are drawn (``draw``) only after the child has answered: nothing in any
    process says beforehand which elements will be read. An ``untrusted`` child (the candidate) gets
    no command between the inputs' write and its timed ``Run``, nor before it while the ring may hold
    inputs it has not been timed on (the reference's of a round that times the reference first): its
    outputs are released right after the samples are read, when the ring holds only inputs it has
    computed already."""
    clock = ref.clock
    gated = gated and clock is not None and child.ready.gated
    _clear_outputs(child, untrusted)
    cpu0, w0 = sched_ns(child.pid)
    _, hw0 = thread_sched_ns()
    n = len(sets)
    if gated:
        args, reply, blocked, write_ms, t0, t_flag, enqueue_ms = _gated_run(
            child, ref, sets, run, policy, others, null, untrusted
        )
    else:
        args, reply, blocked, write_ms, t0, t_flag, enqueue_ms = _plain_run(child, ref, sets, run, others, null)
    samples: list = []
    shapes: list = []
    sampled: list[int] = []
    pos_seed = draw()
    if not null:
        samples, shapes, sampled = _read(child, reply, n, pos_seed, policy, max_numel)
    t1 = time.perf_counter()
    cpu1, w1 = sched_ns(child.pid)
    _, hw1 = thread_sched_ns()
    cpu_phase = child.last_cpu_ns if not gated and not null else None
    if untrusted and child.holds_outputs:  # outside the clock, while the ring holds inputs it has computed
        child.request(P.Release(seq=0), stage="releasing outputs")
    busy = (cpu1 - cpu0) + (w1 - w0)
    wall_ns = (t1 - t0) * 1e9
    child_ms = float(sum(reply.child_ms)) if reply.child_ms else None
    ph = Phase(
        (t1 - t0) * 1e3,
        (t1 - t_flag) * 1e3,
        enqueue_ms,
        None if gated else child_ms,
        gated,
        blocked,
        (w1 - w0) / busy if busy > 0 else 0.0,
        samples,
        shapes,
        pos_seed,
        reply.outputs,
        sampled,
        list(reply.violations),
        harness_wait_fraction=(hw1 - hw0) / wall_ns if wall_ns > 0 else 0.0,
        flag_ms=(t_flag - t0) * 1e3,
        write_ms=write_ms,
        null=null,
        args=args,
        cpu_ms=cpu_phase / 1e6 if cpu_phase is not None else None,
    )
    if gated:
        _pass_child_clock(child, ph, child_ms)
    return ph


def _clear_outputs(child: Child, untrusted: bool) -> None:
    """Before the clock starts: the child's last outputs poisoned and freed (``child._poison``), as before
    every trial (the candidate's were released after its last phase), and the last phase's unread torch
    shares released."""
    if child.holds_outputs:
        if untrusted:
            raise Tampering("the candidate holds outputs before a timed phase (the harness's own record)")
        child.request(P.Release(seq=0), stage="releasing outputs")
    child.settle_outputs()


def _plain_run(child: Child, ref: ReferenceRun, sets: list[list], run: dict, others: list[Child], null: bool) -> tuple:
    """A plain phase's ``Run`` (the host clock): inputs written, Run sent -> reply received.
    (args, reply, blocked, write_ms, t0, t_flag, enqueue_ms), as ``_gated_run``."""
    args = place(ref, sets, [child, *others])
    t0 = time.perf_counter()
    reply = child.request(P.Run(seq=0, batches=args, null=null, **run), stage="timing")
    t_flag = time.perf_counter()
    return args, reply, False, 0.0, t0, t_flag, (t_flag - t0) * 1e3


def _pass_child_clock(child: Child, ph: Phase, child_ms: float | None) -> None:
    """A gated reply's own clock is of the child's previous gated phase: it goes there (this phase's comes
    with the next reply)."""
    prev = getattr(child, "last_gated_phase", None)
    if prev is not None and child_ms is not None:
        prev.child_ms = child_ms
    child.last_gated_phase = ph  # type: ignore[attr-defined]


def fresh_sets(ref: ReferenceRun, key: str, n: int) -> list[list]:
    seed = ref.seeds.draw(key)
    return [inp.phase_inputs(ref.problem, inp.mix(seed, k), ref.device, ref.signed, ref.drawn) for k in range(n)]


def place(
    ref: ReferenceRun, sets: list[list], children: list[Child], write: bool = True, layout: list[list] | None = None
) -> list[list]:
    """Write input sets into the ring (growing it, and re-mapping it in the children, if needed).

    ``write=False``: only where they will go (a gated phase writes them once the child is frozen);
    ``layout``: write them where an earlier call said."""
    need = sum(shared.inputs_bytes(s) for s in sets) + 4096
    ring = ref.ensure_ring(need)
    for c in children:
        if c.ring_generation != ring.generation:
            c.request(P.MapRing(seq=0, ring=ring.spec), stage="map ring", ring=ring)
            c.ring_generation = ring.generation
    return ring.place(sets, layout=layout, write=write)[0]


def _drawer(ref: ReferenceRun, key: str) -> Callable[[], int]:
    return lambda: ref.seeds.draw(key)
