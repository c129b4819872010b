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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headroom.measure import interleave_rounds
from headroom.verify import cpus, launches
from headroom.verify import protocol as P
from headroom.verify import timing as tm
from headroom.verify.calibrate import (  # noqa: F401
    RING_SLACK,
    ReferenceTiming,
    _queue_limit,
    memory_iters,
    start_reference,
    timing_bytes,
)
from headroom.verify.phase import Phase, _drawer, _positions, fresh_sets, place, run_phase  # noqa: F401  (re-exported)
from headroom.verify.process import Child, ChildFailed, Tampering
from headroom.verify.reference import HarnessOOM, ReferenceRun, is_oom
from headroom.verify.timed_checks import _check_inputs, _compare_round, _reference_truth  # noqa: F401


class HarnessError(Exception):
    """Timing could not run for a reason that is not the candidate's (verdict error)."""


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


def reference_timing(ref: ReferenceRun, max_numel: int, cand: Child, say: Callable[[str], None]) -> ReferenceTiming:
    """The reference's timed child, started for the problem's first candidate and kept for the others."""
    if ref.timing is not None and ref.timing.tampered:  # a fresh child, not one a candidate wrote into
        ref.timing.close()
        ref.timing = None
    if ref.timing is None:
        ref.timing = start_reference(ref, max_numel, [cand], say)
    return ref.timing


def time_candidate(
    ref: ReferenceRun,
    cand: Child,
    gates: list,
    max_numel: int,
    aggs: dict,
    say: Callable[[str], None],
    violations: set,
    cand_call: launches.CallProfile | None = None,
    cand_free: int | None = None,
) -> Timed:
    """Interleaved rounds of reference and candidate: the result's ``timing`` and ``per_call`` sections."""
    try:
        rt = reference_timing(ref, max_numel, cand, say)
        rounds = _Rounds(ref, rt, cand, gates, max_numel, aggs, violations, cand_call)
        rounds.warm_up()
        rounds.run()
    except HarnessOOM:
        raise
    except (ChildFailed, Tampering):
        raise
    except Exception as e:
        if is_oom(e):
            raise HarnessOOM(f"out of memory in the harness while timing: {e}"[:300]) from None
        raise
    return rounds.result(cand_call, cand_free)


class _Rounds:
    """One candidate's timing: warm-up phases of every arm, then interleaved rounds (``headroom.measure``)."""

    def __init__(
        self,
        ref: ReferenceRun,
        rt: ReferenceTiming,
        cand: Child,
        gates: list,
        max_numel: int,
        aggs: dict,
        violations: set,
        cand_call: launches.CallProfile | None,
    ):
        self.ref, self.rt, self.cand, self.gates, self.max_numel = ref, rt, cand, gates, max_numel
        self.aggs, self.violations, self.policy = aggs, violations, ref.policy
        rt.truth_checks, rt.truth_ms, rt.truth_skipped = 0, 0.0, 0
        if cand.holds_outputs:  # its trials' outputs, released before any of its timed inputs is in the ring
            cand.request(P.Release(seq=0), stage="releasing outputs")
        self.n = rt.n
        if rt.gated:  # the candidate's forwards must fit the queue too (its own count: only its loss if it lies)
            cap = _queue_limit(self.policy, rt.launches, cand_call.launches if cand_call else None)
            self.n = min(self.n, cap) if cap else self.n
        self.plan = arms(ref, rt)
        self.run_of = dict(self.plan)
        self.child_of = {name: (cand if name == "candidate" else rt.child) for name, _ in self.plan}
        self.others = {rt.child.pid: [cand], cand.pid: [rt.child]}
        self.gated_arm = {name: rt.gated for name, _ in self.plan}
        self.phases: dict[str, list[Phase]] = {name: [] for name, _ in self.plan}
        self.waits: dict[str, list[float]] = {"reference": [], "candidate": [], "harness": []}  # judged
        self.waits_seen: dict[str, list[float]] = {"reference": [], "candidate": []}  # every phase's
        self.cand_nulls: list[Phase] = []
        self.last_wall: dict[int, float] = {}
        self.current: dict[str, Any] = {}
        self.stop = ""
        self.placement = cpus.Placement(rt.child, cand)  # disjoint CPU sets, exchanged every round

    def one(self, name: str, sets: list[list], key: str) -> Phase:
        """One phase of an arm; the candidate's inputs and clock checked after it."""
        c = self.child_of[name]
        ph = run_phase(
            c,
            self.ref,
            sets,
            self.run_of[name],
            _drawer(self.ref, key),
            self.policy,
            self.max_numel,
            self.others[c.pid],
            gated=self.gated_arm[name],
            untrusted=name == "candidate",
        )
        if ph.blocked:  # it waited on the GPU inside its enqueue: time it as it runs, serialised
            self.gated_arm[name] = False
        if name == "candidate":
            self.violations.update(ph.violations)
            _check_inputs(self.ref, ph, sets, self.aggs["no_input_mutation"])
            prev = self.last_wall.get(c.pid)
            claimed = ph.child_ms
            wall = prev if ph.gated else ph.wall_ms  # gated: the child's clock is of its previous phase
            if claimed is not None and wall is not None:
                bad = tm.cross_check(wall, claimed)
                self.aggs["timer_consistency"].record(
                    bad is None,
                    (bad + ": its clock or its messages were tampered with")
                    if bad
                    else "the child's own clock agrees with the harness's",
                )
            self.last_wall[c.pid] = ph.wall_ms
        return ph

    def warm_up(self) -> None:
        """A warm-up phase of every arm (a blocked candidate is found here)."""
        ref, rt = self.ref, self.rt
        for name, _ in self.plan:
            wsets = fresh_sets(ref, f"warmup.{name}", self.n)
            ph = self.one(name, wsets, f"warmup.{name}")
            if name == "reference_tf32":
                bad = _reference_truth(ref, rt, ph, wsets, self.gates, self.policy, "warmup")
                rt.tampered = bad is not None
                if bad:  # before this candidate's timing: an earlier candidate sharing the child, or its trials
                    raise ChildFailed(
                        f"the reference's warm-up timed output differs from the truth ({bad}) before "
                        f"the candidate was timed: the reference was tampered with"
                    )
            if name == "candidate" and ph.blocked:
                self._requeue(name)

    def _requeue(self, name: str) -> None:
        """A full queue (fewer forwards per phase do) or a host synchronisation (even one blocks)."""
        m = self.n
        while m > 1:
            m = max(1, m // 4)
            self.gated_arm[name] = True
            if not self.one(name, fresh_sets(self.ref, f"warmup.q{m}", m), f"warmup.q{m}").blocked:
                break
        if self.gated_arm[name] and m < self.n:
            self.n = m  # every arm at the candidate's queue depth, so rounds share their inputs
        else:
            self.gated_arm[name] = False
            self.one(name, fresh_sets(self.ref, f"warmup2.{name}", self.n), f"warmup2.{name}")

    def measure(self, name: str, r: int) -> Phase:
        cur, rt = self.current, self.rt
        if "sets" not in cur or cur["round"] != r:
            cur.clear()  # the last round's inputs go before this round's are drawn
            cur.update(round=r, sets=fresh_sets(self.ref, f"round{r}", self.n), phases={})
            self.placement.place_round(r)  # both frozen between commands
        ph = self.one(name, cur["sets"], f"positions{r}.{name}")
        cur["phases"][name] = ph
        self.phases[name].append(ph)
        who = "candidate" if name == "candidate" else "reference"
        self.waits_seen[who].append(ph.wait_fraction)
        felt = tm.clock_wait(ph.wait_fraction, ph.gated, ph.blocked)
        if felt is not None:
            self.waits[who].append(felt)
        self.waits["harness"].append(ph.harness_wait_fraction)
        if name == "reference_tf32":
            rt.read_min_ms = min(rt.read_min_ms, ph.read_ms)
        if name != "candidate":
            rt.widen(ph)
        got = cur["phases"]
        if name in ("reference_tf32", "candidate") and {"reference_tf32", "candidate"} <= set(got):
            # now, while the reference's outputs of this round are still in its process
            _compare_round(
                rt.child,
                got["reference_tf32"],
                got["candidate"],
                self.gates,
                self.policy,
                self.aggs["timed_outputs"],
                r,
            )
        return ph

    def after_round(self, r: int, _values: dict) -> bool:
        ref, rt, aggs, cand = self.ref, self.rt, self.aggs, self.cand
        sets = self.current["sets"]
        # the reference's sampled timed output of this round against the truth, once both arms are timed:
        # the truth's forward runs between rounds, before an arm that alternates, not before the reference only
        rph = self.current["phases"].get("reference_tf32")
        bad = _reference_truth(ref, rt, rph, sets, self.gates, self.policy, f"truth{r}") if rph is not None else None
        rt.tampered = rt.tampered or bad is not None
        if bad:  # the candidate is the only other code running while it is timed
            aggs["containment"].record(
                False,
                f"round {r}: the reference's timed output differs from the "
                f"truth ({bad}): the reference was tampered with",
            )
        # a null phase of each child every round: the clock's fixed cost follows the machine
        nr = run_phase(
            rt.child,
            ref,
            sets,
            {"tf32": True},
            _drawer(ref, f"null{r}"),
            self.policy,
            self.max_numel,
            self.others[rt.child.pid],
            null=True,
            gated=rt.gated,
        )
        nc = run_phase(
            cand,
            ref,
            sets,
            {"tf32": True},
            _drawer(ref, f"nullc{r}"),
            self.policy,
            self.max_numel,
            self.others[cand.pid],
            null=True,
            gated=self.gated_arm["candidate"],
            untrusted=True,
        )
        if nr.gated:
            rt.null_flag_min_ms = min(rt.null_flag_min_ms, nr.flag_ms)
            rt.enqueue_null_min_ms = min(rt.enqueue_null_min_ms, nr.enqueue_ms)
        else:
            rt.null_min_ms = min(rt.null_min_ms, nr.wall_ms)
        self.cand_nulls.append(nc)
        return aggs["timed_outputs"].passed and aggs["timer_consistency"].passed and aggs["containment"].passed

    def mins(self) -> tuple[float, float]:
        """A lower bound from trusted work and from every child's null phases (a child can only raise its own)."""
        rt = self.rt
        f = min([rt.null_flag_min_ms, *[p.flag_ms for p in self.cand_nulls if p.gated]])
        w = min([rt.null_min_ms, *[p.wall_ms for p in self.cand_nulls if not p.gated]])
        return f, w

    def net(self, name: str, ph: Phase) -> float:
        f, w = self.mins()
        return self.rt.net_ms(ph, self.n, f, w, charged=name == "candidate")

    def run(self) -> None:
        cuda = self.ref.device.startswith("cuda")
        try:
            rounds = interleave_rounds(
                [nm for nm, _ in self.plan],
                lambda name, r: self.net(name, self.measure(name, r)),
                self.policy.round_policy(cuda),
                pair=("reference_tf32", "candidate"),
                on_round=self.after_round,
            )
        finally:
            self.placement.restore()  # the reference's child is kept for the next candidate
        self.stop = rounds.stop

    def result(self, cand_call: launches.CallProfile | None, cand_free: int | None) -> Timed:
        rt, n, phases = self.rt, self.n, self.phases
        flag_min, null_min = self.mins()
        per = {
            name: [rt.net_ms(p, n, flag_min, null_min, charged=name == "candidate") for p in ps]
            for name, ps in phases.items()
        }
        out = _timing_section(rt, self, per, flag_min, null_min)
        per_call = _per_call(
            rt, phases, [p.enqueue_ms for p in self.cand_nulls if p.gated], n, cand_call, self.gated_arm, cand_free
        )
        ratios = {}
        for name in ("reference_fp32", "reference_compile"):
            if per.get(name):
                ratios[name] = statistics.median(
                    [a / b for a, b in zip(per[name], per["candidate"]) if a > 0 and b > 0] or [float("nan")]
                )
        return Timed(out, per_call, ratios)


def _timing_section(rt: ReferenceTiming, rs: _Rounds, per: dict, flag_min: float, null_min: float) -> dict:
    """The result's ``timing``: the judgement (``timing.judge``) and what it was judged on."""
    n, phases, policy, waits = rs.n, rs.phases, rs.policy, rs.waits
    overhead = flag_min if rt.gated else null_min + rt.read_min_ms
    drift = (
        statistics.median(per["reference_tf32"]) / rt.standalone_ms
        if per["reference_tf32"] and rt.standalone_ms > 0
        else None
    )  # 0: too fast to time alone
    ref_cpu = [p.cpu_ms / n for p in phases["reference_tf32"] if p.cpu_ms is not None]
    cpu_drift = statistics.median(ref_cpu) / rt.cpu_alone_ms if ref_cpu and rt.cpu_alone_ms else None
    judged = tm.judge(
        per["reference_tf32"],
        per["candidate"],
        policy,
        {k: statistics.median(v) for k, v in waits.items() if v},
        drift,
        cpu_drift,
    )
    clocks = {name: [p.child_ms for p in ps if p.child_ms is not None] for name, ps in phases.items()}
    cand_nulls = rs.cand_nulls
    out = {
        "method": "harness_clock",
        "clock": "gated" if rt.gated else "plain",
        "unit": "ms",
        "rounds": len(per["candidate"]),
        "rounds_stop": rs.stop,
        "iters_per_phase": n,
        "warmup_phases": 1,
        "overhead_ms": overhead,
        "null_min_ms": null_min,
        "null_flag_min_ms": flag_min,
        "read_min_ms": rt.read_min_ms,
        "read_max_ms": rt.read_max_ms,
        "write_max_ms": rt.write_max_ms,
        "charged_excess_ms": statistics.median(rt.excess_ms(p) for p in phases["candidate"])
        if phases["candidate"] and phases["candidate"][0].gated
        else 0.0,
        "ci_method": "median of per-round ratios, 95% interval from order statistics (distribution-free)",
        "speedup_estimate": judged.speedup,
        "speedup_ci": list(judged.ci) if judged.ci else None,
        "ci_coverage": judged.coverage,
        "inconclusive": judged.reasons
        + [f"{o}: the two timed children shared a core" for o in rs.placement.overlaps[:1]],
        "cpu_split": rs.placement.describe(),
        "reference_standalone_ms": rt.standalone_ms,
        "reference_drift": drift,
        "reference_cpu_alone_ms": rt.cpu_alone_ms,
        "reference_cpu_drift": cpu_drift,
        "order_medians": tm.order_medians(per["reference_tf32"], per["candidate"]),
        "wait_fraction": {
            k: statistics.median(v) for k, v in {**rs.waits_seen, "harness": waits["harness"]}.items() if v
        },
        "wait_judged": {k: len(v) for k, v in waits.items()},  # phases whose clock a wait could stretch
        "child_clock_ms": {k: statistics.median(v) / n for k, v in clocks.items() if v},
        "candidate_clock": "gated" if rs.gated_arm["candidate"] else "plain",
        "reference_truth": {
            "checks": rt.truth_checks,
            "skipped": rt.truth_skipped,
            "harness_ms": rt.truth_ms,
            "method": "one sampled timed iteration of the reference per phase (warm-up and "
            "every round) against the harness's truth, outside the clock",
        },
        "candidate_blocked": rt.gated and not rs.gated_arm["candidate"],
        "overhead_share": overhead / statistics.median([p.wall_ms for p in phases["reference_tf32"]])
        if phases["reference_tf32"]
        else None,
        "calibration": {
            **rt.calibration,
            "candidate_null_phase_ms": [p.wall_ms for p in cand_nulls],
            "candidate_null_flag_ms": [p.flag_ms for p in cand_nulls if p.gated],
        },
    }
    for name, _ in rs.plan:
        out[name] = tm.stats(per[name])
        out[f"{name}_per_round"] = per[name]
    return out


def _kernels(prof: launches.CallProfile | None) -> list[dict]:
    return [{"name": name, "us": us, "calls": k} for name, us, k in prof.top_kernels] if prof else []


def _per_call(
    rt: ReferenceTiming,
    phases: dict[str, list[Phase]],
    cand_null_enq: list[float],
    n: int,
    cand_call: launches.CallProfile | None,
    gated_arm: dict[str, bool],
    cand_free: int | None = None,
) -> dict:
    """What one call costs besides its device time: CPU per call unprofiled, launches, host syncs, bytes to host.

    ``call_us``: a gated phase's enqueue on the harness's clock, less the fixed cost of a Run without
    forwards (min over both children's null phases), per forward: the CPU time of one call when it
    never waits for the GPU, describing its outputs included (a few us per output tensor)."""
    enq_null = min([rt.enqueue_null_min_ms, *cand_null_enq]) if cand_null_enq else rt.enqueue_null_min_ms

    def side(name: str, prof: launches.CallProfile | None, gated: bool) -> dict:
        ps = phases.get(name) or []
        d: dict = {
            "launches": prof.launches if prof else None,
            "kernel_us": prof.kernel_us if prof else None,
            "syncs": prof.syncs if prof else None,
            "d2h_bytes": prof.d2h_bytes if prof else None,
            "call_us": None,
            "call_us_method": None,
        }
        if ps and gated and all(p.gated and not p.blocked for p in ps):
            d["call_us"] = max(statistics.median(p.enqueue_ms for p in ps) - enq_null, 0.0) * 1e3 / n
            d["call_us_method"] = "gated enqueue on the harness's clock, less a null Run, per forward (unprofiled)"
        elif ps and prof is not None and prof.kernel_us is not None:
            serial = statistics.median(rt.net_ms(p, n) for p in ps) * 1e3
            d["call_us"] = max(serial - prof.kernel_us, 0.0)
            d["call_us_method"] = (
                "serialised forward on the harness's clock less the profiler's kernel time "
                "(the call waits on the GPU: its CPU time cannot be timed apart)"
            )
        return d

    method = rt.call.method if rt.call is not None else "not measured"
    ref_side = side("reference_tf32", rt.call, rt.gated)
    ref_side["top_kernels"] = _kernels(rt.call)  # in the harness
    ref_side["child"] = {
        "kernel_us": rt.child_call.kernel_us if rt.child_call else None,
        "launches": rt.child_call.launches if rt.child_call else None,
        "top_kernels": _kernels(rt.child_call),
        "free_bytes_at_warmup": rt.memory.get("free_bytes"),
    }
    cand_side = side("candidate", cand_call, gated_arm.get("candidate", False))
    cand_side["top_kernels"] = _kernels(cand_call)  # in its child
    cand_side["free_bytes_at_warmup"] = cand_free
    return {
        "reference": ref_side,
        "candidate": cand_side,
        "method": f"launches, kernel_us, syncs, d2h_bytes: {method}; reference: profiled in the harness, "
        f"reference.child: in the reference's timed child; candidate: in its child; top_kernels: the "
        f"{launches.TOP_KERNELS} kernels (CPU: aten ops, by count) with the most time per forward",
    }
