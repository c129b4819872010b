"""What the harness checks of a round outside the clock: the candidate's sampled timed outputs
against the reference's (``compare_round``), its inputs unchanged (``check_inputs``), and the reference's
sampled timed output against the truth (``reference_truth``)."""

from __future__ import annotations

import time
from typing import Any

from headroom.verify import checks as ck
from headroom.verify import protocol as P
from headroom.verify import shared
from headroom.verify import timing as tm
from headroom.verify.calibrate import ReferenceTiming
from headroom.verify.phase import Phase, _positions
from headroom.verify.process import Child
from headroom.verify.reference import ReferenceRun, timed_truth


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


def _reference_truth(
    ref: ReferenceRun, rt: ReferenceTiming, ph: Phase, sets: list[list], gates: list, policy: tm.Policy, key: str
) -> str | None:
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
                return (
                    f"timed iteration {k}, output {j}: sampled relative L2 error {rel:.2e} (gate {g.rel_l2:.2e}), "
                    f"element error {elem:.2e} (gate {ck.TIMED_SLACK * g.elem:.2e})"
                )
        return None
    finally:
        rt.truth_checks += 1
        rt.truth_ms += (time.perf_counter() - t0) * 1e3


def _compare_round(
    ref_child: Child, ref_ph: Phase, cand_ph: Phase, gates: list, policy: tm.Policy, agg: Any, r: int
) -> None:
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
        items = [
            (rout, _positions(cand_ph.pos_seed, k, j, math.prod(rout.shape), policy.samples_per_output))
            for j, rout in enumerate(rrow)
        ]
        rvals = shared.gather_samples(ref_child, items, ref_child.job.device)
        for j, (cv, rv, rout) in enumerate(zip(crow, rvals, rrow)):
            g = gates[j] if j < len(gates) else None
            rms = ck.rms(shared.read_full(ref_child, rout, ref_child.job.device))
            ok, detail = ck.samples_match(cv, rv, g, rms)
            if not ok:
                agg.record(
                    False,
                    f"round {r}, timed iteration {k}, output {j}: {detail} (a stale, cached, "
                    f"skipped or unfinished output while timed)",
                )
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
    agg.record(
        True,
        f"timed outputs match the reference's at iterations and positions drawn after the child "
        f"answered (up to {policy.sampled_iterations} iterations x {policy.samples_per_output} "
        f"elements per phase), per element and in relative L2",
    )
