"""Comparison as pure functions: one trial's outputs against the truth, sensitivity across trials.

Nothing here talks to a process: the harness reads a candidate's outputs and
its inputs (after the call) from memory and hands tensors to these functions,
which fold the outcome into named checks (``Agg``; one check per name,
aggregated over trials, the detail naming the worst trial).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from headroom.verify import checks as ck

CHECK_ORDER = (
    "integrity",
    "protocol",
    "containment",
    "output_type",
    "no_input_mutation",
    "finite",
    "rel_l2",
    "allclose",
    "centred",
    "exact",
    "sensitivity",
    "stream_ordering",
    "timed_outputs",
    "timer_consistency",
)
UNORDERED_MS = 0.1  # GPU: a device-wide synchronise after the caller's stream is idle takes microseconds
SKETCH = 4096  # truth elements kept per output for the sensitivity check


@dataclass
class Check:
    name: str
    passed: bool
    detail: str


class Agg:
    """Per-trial outcomes folded into one check (the first failure, or the worst passing value)."""

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
        if value is not None and math.isfinite(value) and (self.worst is None or value > self.worst[0]):
            self.worst = (value, detail)

    def check(self) -> Check:
        if not self.passed:
            return Check(self.name, False, self.fail_detail)
        return Check(self.name, True, self.worst[1] if self.worst else self.last_ok)


def new_aggs() -> dict[str, Agg]:
    return {n: Agg(n) for n in CHECK_ORDER}


def fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    if not math.isfinite(x):
        return str(x)
    return f"{x:.2e}"


@dataclass
class Truth:
    """One trial's truth, held only while that trial is compared."""

    label: str
    published: bool
    truth: list  # float64 (the reference's own output for exact dtypes)
    ref_out: list  # the reference in the headline precision
    gates: list  # Gates | None per output


@dataclass
class TrialRecord:
    """What outlives a trial: gates, a sketch of the truth, the candidate's output digests and errors."""

    label: str
    gates: list
    sketch: list  # per output: (numel, sampled truth values as float64 or exact)
    digests: list = field(default_factory=list)
    errors: list = field(
        default_factory=list
    )  # per output: the candidate's relative L2 error (None: exact / not measured)


def sketch(t: Any) -> tuple[int, Any]:
    """Truth values at fixed positions (the same for every trial with the same numel)."""
    import torch

    flat = t.reshape(-1)
    n = flat.numel()
    if n <= SKETCH:
        return n, flat.detach().cpu().clone()
    idx = torch.linspace(0, n - 1, SKETCH, dtype=torch.float64).round().long()
    return n, flat[idx.to(flat.device)].detach().cpu().clone()


def compare_outputs(
    truth: Truth, outs: list, aggs: dict[str, Agg], info: dict, errors: list | None = None
) -> list[str] | None:
    """Fold one trial's outputs into the checks; returns their exact digests (None: wrong structure).
    ``errors`` gets each output's relative L2 error (None where exact or not finite)."""
    import torch

    label = truth.label
    if len(outs) != len(truth.truth):
        aggs["output_type"].record(False, f"{label}: {len(outs)} output(s), the reference returns {len(truth.truth)}")
        return None
    for j, (c, r) in enumerate(zip(outs, truth.ref_out)):
        if tuple(c.shape) != tuple(r.shape) or c.dtype != r.dtype:
            aggs["output_type"].record(
                False, f"{label}: output {j} is {c.dtype} {tuple(c.shape)}, expected {r.dtype} {tuple(r.shape)}"
            )
            return None
    aggs["output_type"].record(True, f"{len(outs)} plain tensor output(s), shapes and dtypes match")
    digests = []
    kb_ok = True
    for j, (c, t, r, g) in enumerate(zip(outs, truth.truth, truth.ref_out, truth.gates)):
        tag = f"{label}, output {j}" if len(outs) > 1 else label
        digests.append(ck.digest(c))
        if truth.published:
            kb_ok = kb_ok and ck.kernelbench_allclose(c, r)
        if errors is not None:
            errors.append(None)
        if g is None:
            if bool(torch.equal(c, r)):
                aggs["exact"].record(True, "integer outputs equal the reference's exactly")
            else:
                aggs["exact"].record(False, f"{tag}: {int((c != r).sum())} of {r.numel()} integer elements differ")
            continue
        e = ck.measure(c, t, r)
        excused = f" ({e.reference_nonfinite} where the fp32 reference overflows too)" if e.reference_nonfinite else ""
        aggs["finite"].record(
            e.finite_ok,
            f"{tag}: {_nonfinite_reason(e)}"
            if not e.finite_ok
            else f"no NaN/Inf where the truth and the reference are finite{excused}",
        )
        if not e.finite_ok:
            continue
        if errors is not None:
            errors[-1] = e.rel_l2
        aggs["rel_l2"].record(
            e.rel_l2 <= g.rel_l2,
            f"{tag}: relative L2 error {fmt(e.rel_l2)} (gate {fmt(g.rel_l2)})",
            e.rel_l2 / g.rel_l2,
        )
        aggs["allclose"].record(
            e.elem <= g.elem,
            f"{tag}: max element error {fmt(e.elem)} x (rms + |t|) (gate {fmt(g.elem)})",
            e.elem / g.elem,
        )
        if e.centred is not None:
            aggs["centred"].record(
                e.centred <= g.centred,
                f"{tag}: centred relative error {fmt(e.centred)} (gate {fmt(g.centred)})",
                e.centred / g.centred,
            )
        info["max_rel_l2"] = max(info.get("max_rel_l2", 0.0), e.rel_l2)
    if truth.published:
        info["kernelbench_allclose"] = kb_ok
    return digests


def _nonfinite_reason(e: ck.Errors) -> str:
    parts = []
    if e.nonfinite > e.truth_nonfinite:
        parts.append(f"{e.nonfinite - e.truth_nonfinite} unexpected NaN/Inf value(s)")
    if e.truth_nonfinite:
        parts.append(
            f"{e.truth_nonfinite} value(s) where the truth is inf or NaN (beyond the output format's range) and "
            f"the candidate holds neither that nor the reference's value"
        )
    return "; ".join(parts)


def record_ordering(label: str, unordered_ms: list[float], agg: Agg) -> None:
    """GPU: work still running after the caller's stream finished was put on a side stream and not
    joined — a consumer on the caller's stream would read it unfinished. ``unordered_ms``: one wait per
    call of the same trial; the check fails when every call waited past the limit (a child descheduled
    inside the synchronise reads as one long wait; a side stream's work is there at every call)."""
    over = min(unordered_ms) > UNORDERED_MS
    waits = ", ".join(f"{w * 1e3:.0f}" for w in unordered_ms)
    agg.record(
        not over,
        f"{label}: a device-wide synchronise still waited {waits} us after the caller's stream was done "
        f"({len(unordered_ms)} call(s)): work on a side stream not ordered with it"
        if over
        else "all work ordered on the caller's stream",
    )


def record_inputs(label: str, before: list, after: list, agg: Agg) -> None:
    """The inputs in the ring after the call must equal what the harness wrote (exact digests)."""
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    if changed:
        agg.record(False, f"{label}: input(s) {changed} were modified by the candidate")
    else:
        agg.record(True, "inputs unchanged after every call (exact digest of the harness's ring)")


def _materially_different(a: TrialRecord, b: TrialRecord, o: int) -> bool:
    """Whether output ``o``'s truth differs between two trials by more than a candidate may be off.

    Functions invariant to a shift or a scale of their inputs (softmax, argmax, normalisations)
    give the same answer for a trial and its variant: no change is expected there.
    """
    import torch

    (na, ta), (nb, tb) = a.sketch[o], b.sketch[o]
    if na != nb or ta.shape != tb.shape:
        return True
    g = a.gates[o]
    if g is None or not ta.is_floating_point():
        return not bool(torch.equal(ta, tb))
    ta, tb = ta.double(), tb.double()
    m = torch.isfinite(ta) & torch.isfinite(tb)
    if not bool(m.any()):
        return False
    ta, tb = ta[m], tb[m]
    diff = float(torch.linalg.vector_norm(ta - tb))
    allowed = g.rel_l2 * float(torch.linalg.vector_norm(ta))
    if ta.numel() > 1:
        allowed = min(allowed, g.centred * float(torch.linalg.vector_norm(ta - ta.mean())))
    return diff > 10 * allowed


def sensitivity(records: list[TrialRecord], agg: Agg) -> None:
    """The candidate's output must change whenever the true output changes materially."""
    pairs = 0
    for i in range(len(records)):
        for j in range(i + 1, len(records)):
            a, b = records[i], records[j]
            for o, (da, db) in enumerate(zip(a.digests, b.digests)):
                if not _materially_different(a, b, o):
                    continue
                pairs += 1
                if da == db:
                    agg.record(
                        False,
                        f"output {o} is bit-identical for {a.label} and {b.label} although the "
                        f"true outputs differ: a constant or cached answer",
                    )
                    return
    if pairs:
        agg.record(True, f"outputs change with the inputs ({pairs} trial pairs)")


def out_gates(records: list[TrialRecord]) -> list:
    """Per output, the loosest gates over the trials, and the relative L2 error its timed samples may
    reach against the reference's (``ck.timed_l2_bound``; for the timed-output samples)."""
    n = max((len(r.gates) for r in records), default=0)
    out: list = []
    for j in range(n):
        gs = [r.gates[j] for r in records if j < len(r.gates) and r.gates[j] is not None]
        if not gs:
            out.append(None)
            continue
        loose = max(gs, key=lambda g: g.elem)
        cand = max((r.errors[j] for r in records if j < len(r.errors) and r.errors[j] is not None), default=0.0)
        ref = max((g.ref.rel_l2 for g in gs if g.ref is not None), default=0.0)
        rel_l2 = max(g.rel_l2 for g in gs)
        out.append(
            ck.Gates(
                rel_l2, loose.elem, max(g.centred for g in gs), loose.ref, timed_l2=ck.timed_l2_bound(rel_l2, cand, ref)
            )
        )
    return out
