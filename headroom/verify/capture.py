"""Under CUDA graphs (``--graphs``): each model's call captured in a graph and replayed, and what that says.

``check`` asks a child (the reference's or the candidate's) to capture one call and replay it on
other inputs (``protocol.Capture``), then reads the replay's outputs and compares them with the
truth exactly as a trial's are (``compare``). ``judge`` turns both children's outcomes and the
timing into the result's ``capture`` field and, where it decides, the verdict:

- the reference breaks capture: ``inconclusive`` (nothing to hold the candidate to);
- the candidate's capture or replay raises: ``error``, reason ``breaks capture: <error>``;
- its replay's outputs are wrong: ``fail``, reason ``breaks capture: <failed check>``;
- a timed phase of it blocked (its call waited on the GPU: a host synchronisation the capture did
  not show, for example one taken only outside a capture): ``error``, ``breaks capture: ...``;
- the timing did not run on the gated clock: ``inconclusive`` (a graph replay's time is not known).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headroom.verify import compare as cmp
from headroom.verify import inputs as inp
from headroom.verify import protocol as P
from headroom.verify import shared
from headroom.verify.phase import fresh_sets, place
from headroom.verify.process import Child
from headroom.verify.reference import ReferenceRun, truth

OK = "ok"
NOT_CHECKED = "not checked"
BREAKS = "breaks capture: "
BLOCKED = (
    "a timed phase waited on the GPU inside the candidate's call: a host synchronisation (.item(), "
    ".cpu(), torch.cuda.synchronize(), a data-dependent shape) that a CUDA graph cannot hold, "
    "although its capture passed"
)


@dataclass
class Outcome:
    """One child's capture: ``error`` (capture or replay raised, its first line) or ``mismatch`` (the
    replay's outputs failed a check: its name and detail); neither: it captures and replays right."""

    error: str | None = None
    mismatch: str | None = None
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and self.mismatch is None

    def status(self) -> str:
        """The ``capture`` field: ``ok`` or ``breaks capture: <why>``."""
        if self.error is not None:
            return BREAKS + self.error
        if self.mismatch is not None:
            return BREAKS + f"the replay's output is wrong ({self.mismatch})"
        return OK


def check(ref: ReferenceRun, child: Child, max_numel: int, who: str, others: list[Child]) -> Outcome:
    """Capture one call of ``child``'s model and replay it on a second input set; compare the replay's
    outputs with that set's truth as a trial's are. ``others``: children that map the ring too."""
    sets = fresh_sets(ref, f"capture.{who}", 2)
    args = place(ref, sets, [child, *others])
    assert ref.ring is not None  # place made it
    spec = inp.TrialSpec(index=0, kind="dist", family="graph replay")
    tr = truth(ref, spec, shared.view_all(ref.ring, args[1]), {})
    del sets
    reply = child.request(P.Capture(seq=0, args=args[0], replay=args[1]), stage=f"capturing {who} in a CUDA graph")
    if reply.error is not None:
        return Outcome(error=reply.error[:300], violations=list(reply.violations))
    aggs = cmp.new_aggs()
    outs = shared.read_outputs(child, reply.outputs, max_numel, ref.device, tr.label, aggs)
    if outs is not None:
        cmp.compare_outputs(tr, outs, aggs, {})
    del outs, tr
    failed = [a.check() for a in aggs.values() if a.applicable and not a.passed]
    mismatch = "; ".join(f"{c.name}: {c.detail}" for c in failed)[:300] if failed else None
    return Outcome(mismatch=mismatch, violations=list(reply.violations))


@dataclass
class Judged:
    """The result's ``capture`` field, and the verdict and reason ``--graphs`` decides (None: it does not)."""

    capture: str
    verdict: str | None = None
    reason: str | None = None


def judge(cand: Outcome | None, ref: Outcome | None, timing: dict | None) -> Judged:
    """What ``--graphs`` says of a candidate: see the module docstring. ``None``: not checked (the
    candidate failed earlier); ``timing``: the result's timing section (None: not timed)."""
    if ref is not None and not ref.ok:
        return Judged(
            cand.status() if cand is not None else NOT_CHECKED,
            "inconclusive",
            f"the reference {ref.status()}: a candidate's capture has nothing to be held to",
        )
    if cand is None:
        return Judged(NOT_CHECKED)
    if not cand.ok:
        return Judged(cand.status(), "error" if cand.error is not None else "fail", cand.status())
    if timing is None:
        return Judged(OK)
    if timing.get("candidate_blocked"):
        return Judged(BREAKS + BLOCKED, "error", BREAKS + BLOCKED)
    if timing.get("clock") != "gated":
        cal = timing.get("calibration") or {}
        why = (
            "the reference's own call waits on the GPU"
            if cal.get("reference_blocked")
            else f"the gated clock is unavailable ({cal.get('gate_unavailable') or 'no stream memory operations'})"
        )
        return Judged(
            OK,
            "inconclusive",
            f"--graphs times on the gated clock (launches hidden, as a graph "
            f"replay runs), and here it did not run: {why}",
        )
    return Judged(OK)
