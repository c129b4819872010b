"""What each sealed child used: its CPU while timed and its memory footprint, from its cgroup's own
accounting (``info["sandbox"]``), and the review flags on them (never part of the verdict)."""

from __future__ import annotations

import os
from typing import Any

CPU_SLACK = 1.25  # parallelism above the allowed CPUs by more than this factor (plus 0.1) is flagged


def _cpu_use(child: Any) -> dict | None:
    if not getattr(child, "run_forwards", 0) or not child.run_wall_ns:
        return None
    return {
        "cpu_ms_per_forward": child.run_cpu_ns / child.run_forwards / 1e6,
        "parallelism": child.run_cpu_ns / child.run_wall_ns,
        "forwards": child.run_forwards,
    }


def report(cand: Any, ref: Any, threads: int | None) -> dict:
    """``info["sandbox"]``: what each child got, and the CPU it used while timed."""
    out: dict = {"candidate": cand.sandbox.describe()}
    if ref is not None:
        out["reference"] = ref.sandbox.describe()
    c, r = _cpu_use(cand), _cpu_use(ref) if ref is not None else None
    if c is not None:
        allowed = threads or len(cand.sandbox.cpus) or (os.cpu_count() or 1)
        out["cpu"] = {
            "candidate": c,
            "reference": r,
            "allowed_cpus": allowed,
            "method": "cgroup CPU time (every process of the child) over the harness's wall time of its timed phases",
        }
    return out


# review flag: a whole footprint beyond both (an honest torch.compile in-process takes 100s of MiB)
FOOTPRINT_RATIO, FOOTPRINT_SLACK = 1.25, 256 << 20


def footprint_flags(info: dict | None) -> list:
    """A review flag when the candidate's process held much more memory over its life than the reference's
    (each child's memory cgroup: what it allocated at import and in /dev/shm counts, which the peak of one
    forward does not see)."""
    from headroom.verify.compare import Check

    c = ((info or {}).get("candidate") or {}).get("memory_peak_bytes")
    r = ((info or {}).get("reference") or {}).get("memory_peak_bytes")
    if not c or not r or c <= FOOTPRINT_RATIO * r + FOOTPRINT_SLACK:
        return []
    return [
        Check(
            "memory_footprint",
            False,
            f"the candidate's processes held {c / 2**20:.0f} MiB at their peak, the "
            f"reference's {r / 2**20:.0f} MiB (memory cgroups, import included)",
        )
    ]


def cpu_flags(info: dict | None) -> list:
    """A review flag when the candidate used more CPUs in parallel than both children were allowed."""
    from headroom.verify.compare import Check

    cpu = (info or {}).get("cpu")
    if not cpu or not cpu.get("candidate"):
        return []
    par, allowed = cpu["candidate"]["parallelism"], cpu["allowed_cpus"]
    if par > allowed * CPU_SLACK + 0.1:
        ref = cpu.get("reference") or {}
        return [
            Check(
                "cpu",
                False,
                f"the candidate used {par:.2f} CPUs in parallel while timed ({allowed} "
                f"allowed; the reference {ref.get('parallelism', float('nan')):.2f}): "
                f"its speedup is not the kernel's alone",
            )
        ]
    return []
