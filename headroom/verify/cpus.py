"""Which CPUs each timed child runs on: on a CPU the reference and the candidate never share a core.

With two CPUs or more the harness's CPUs are split into two halves of equal size: the reference's
child starts on the first (``threads`` CPUs of it, at most half), the candidate's on the second, each
with its own cgroup ``cpuset`` (which every thread and process it starts inherits, and which its uid
cannot write) and the same CFS quota. Whatever kernel work a candidate leaves behind that the seccomp
filter does not refuse (writeback of files it dirtied, reclaim of its memory, interrupts of its
devices) then lands on its own cores, not on the reference's.

A fixed split would let another process's load on one core bias every round the same way, which
neither the interval nor the order rule sees. So where the harness can write both cgroups' cpusets,
the two sets change places every round while both children are frozen (``place_round``): in the
rounds that time the reference first (even) the reference runs on the first half, in the others on
the second. A core that is slower for whatever reason then falls on one round order only, and the
order rule (the two orders' medians within 1.10x) bounds what it can move. Every placement is checked
against the kernel (``Cpus_allowed_list`` of every task of both children) and recorded
(``info.sandbox.cpu_split``). With one CPU the two share it, and the reference's CPU time per forward
against its calibration is the guard (``timing.reference_cpu_drift``).
"""

from __future__ import annotations

import os
from typing import Any

from headroom.verify.cgroup import off


def split(threads: int | None) -> tuple[list[int], list[int], int | None] | None:
    """(the reference's CPUs, the candidate's, the CFS quota in CPUs), disjoint and of equal size;
    None with fewer than two CPUs (or the split turned off: ``HEADROOM_VERIFY_SEAL_OFF=split``)."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2 or off("split"):
        return None
    half = len(allowed) // 2
    k = min(threads, half) if threads else half
    return allowed[:k], allowed[half : half + k], (threads if threads else None)


def shared(threads: int | None) -> tuple[list[int], int | None]:
    """One CPU set and quota for both timed children (one CPU, or the split turned off)."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads and 0 < threads < len(allowed):
        return allowed[:threads], threads
    return allowed, (threads if threads else None)


def for_role(role: str, threads: int | None) -> tuple[list[int], int | None]:
    """A timed child's CPU set and quota: its half of the split, or the shared set."""
    s = split(threads)
    if s is None:
        return shared(threads)
    ref, cand, quota = s
    return (ref if role == "reference" else cand), quota


def parse_list(text: str) -> set[int]:
    """``0-2,5`` -> {0, 1, 2, 5} (the kernel's CPU list format)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def kernel_cpus(pids: list[int]) -> set[int]:
    """The CPUs any task of ``pids`` may run on, as the kernel says (``/proc/<pid>/task/*/status``)."""
    out: set[int] = set()
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    for ln in f:
                        if ln.startswith("Cpus_allowed_list:"):
                            out |= parse_list(ln.split(":", 1)[1])
                            break
            except (OSError, ValueError):
                continue
    return out


def _pids(child: Any) -> list[int]:
    return sorted({child.pid, *child.sandbox.members()})


class Placement:
    """The two timed children's CPU sets over one candidate's rounds (see the module docstring)."""

    def __init__(self, ref_child: Any, cand_child: Any):
        self.ref, self.cand = ref_child, cand_child
        a, b = list(ref_child.sandbox.cpus), list(cand_child.sandbox.cpus)
        self.sets = (a, b)
        self.disjoint = bool(a) and bool(b) and not set(a) & set(b)
        self.swappable = (
            self.disjoint and ref_child.sandbox.can_set_cpus() and cand_child.sandbox.can_set_cpus() and not off("swap")
        )
        self.rounds: list[dict] = []
        self.overlaps: list[str] = []

    def place_round(self, r: int) -> None:
        """Before round ``r`` (both children frozen): the reference on the first half in even rounds,
        on the second in odd ones, the candidate on the other; then what the kernel says they got."""
        a, b = self.sets
        ref_set, cand_set = (a, b) if r % 2 == 0 or not self.swappable else (b, a)
        if self.swappable:
            self.ref.sandbox.set_cpus(ref_set)
            self.cand.sandbox.set_cpus(cand_set)
        got_ref, got_cand = kernel_cpus(_pids(self.ref)), kernel_cpus(_pids(self.cand))
        self.rounds.append({"reference": sorted(got_ref), "candidate": sorted(got_cand)})
        if self.disjoint and got_ref & got_cand:
            self.overlaps.append(f"round {r}: the kernel lets both children run on CPU(s) {sorted(got_ref & got_cand)}")

    def restore(self) -> None:
        """The reference's child is kept for the next candidate: back on its own half."""
        if self.swappable:
            self.ref.sandbox.set_cpus(self.sets[0])

    def describe(self) -> dict:
        a, b = self.sets
        if not a or not b:
            how = (
                "a child is not sealed: no CPU set of its own; the reference's CPU time per forward against "
                "its calibration is the guard"
            )
        elif not self.disjoint:
            how = (
                "one CPU: both timed children share it; the reference's CPU time per forward against its "
                "calibration is the guard"
                if len(set(a) | set(b)) < 2
                else "the CPU split is off: both timed children share one CPU set"
            )
        elif self.swappable:
            how = (
                "disjoint halves, exchanged every round while both are frozen: the reference on the first "
                "half in the rounds that time it first, on the second in the others"
            )
        else:
            how = "disjoint halves, fixed (no writable cpuset: each child's affinity, set in the child)"
        return {
            "reference": a,
            "candidate": b,
            "disjoint": self.disjoint,
            "swapped": self.swappable,
            "method": how,
            "by_round": self.rounds,
            "disjoint_in_every_round": self.disjoint and not self.overlaps and bool(self.rounds),
            "overlaps": self.overlaps,
        }
