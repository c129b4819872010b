"""Results: one candidate's verdict (``VerifyResult``), a suite document, and the JSON writer.

The JSON is the contract ``headroom project --speedups`` reads: ``problem``,
``verdict`` and ``speedup`` (set for ``pass`` only) keep their names and
meaning across versions; new fields are only added. Verdicts:

- ``pass``: every check passed and the speedup is conclusive (``speedup``,
  ``speedup_ci``);
- ``fail``: a correctness or tampering check failed (``checks``, ``reason``);
- ``error``: the candidate could not be built or run, or the harness ran out
  of memory (``reason``);
- ``inconclusive``: correct, but the timing could not call a speedup
  (``reason``; the estimate is kept in ``timing``).

With ``--graphs``, ``capture`` says whether the candidate's call captures in a
CUDA graph (``ok``, ``breaks capture: <why>``, ``not checked``); a reason
starting ``breaks capture:`` is why an ``error`` or ``fail`` came from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from headroom import jsonio
from headroom.verify.compare import Check

RESULTS_TOOL = "headroom verify"
RESULTS_VERSION = 1
VERDICTS = ("pass", "fail", "error", "inconclusive")


@dataclass
class VerifyResult:
    """One candidate's verdict (``headroom.jsonio.plain`` of it is the ``--json`` contract)."""

    problem: str
    candidate: str
    verdict: str
    speedup: float | None = None
    speedup_fp32: float | None = None
    speedup_compile: float | None = None
    speedup_ci: list | None = None  # 95% interval of ``speedup`` [lo, hi]
    memory_ratio: float | None = None
    checks: list[Check] = field(default_factory=list)
    # Flags for review: their names and details (a flag has no verdict).
    flags: list[Check] = field(
        default_factory=list, metadata=jsonio.encoded(lambda fs: [{"name": f.name, "detail": f.detail} for f in fs])
    )
    device: str = ""
    baseline: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    launches_per_call: dict = field(default_factory=dict)
    # per call of the reference and the candidate: CPU time unprofiled (call_us), launches, host
    # synchronisations, device-to-host bytes, kernel time on the profiler's clock (what `project` reads)
    per_call: dict = field(default_factory=dict)
    build: dict | None = None
    reason: str | None = None
    # --graphs: "ok", "breaks capture: <why>" (the candidate's capture in a CUDA graph), else "not checked"
    capture: str = "not checked"
    seed: int | None = None
    info: dict = field(default_factory=dict)
    elapsed_s: float = field(default=0.0, metadata=jsonio.rounded(3))

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "problem",
        "candidate",
        "verdict",
        "speedup",
        "speedup_fp32",
        "speedup_compile",
        "speedup_ci",
        "memory_ratio",
        "checks",
        "flags",
        "review",
        "device",
        "baseline",
        "timing",
        "memory",
        "launches_per_call",
        "per_call",
        "build",
        "reason",
        "capture",
        "seed",
        "info",
        "elapsed_s",
    )

    @property
    def review(self) -> bool:
        """Whether a flag asks a person to look at the candidate."""
        return bool(self.flags)


def suite_document(results: list[VerifyResult], device: str, **extra: Any) -> dict:
    return {
        "tool": RESULTS_TOOL,
        "version": RESULTS_VERSION,
        "device": device,
        "results": [jsonio.plain(r) for r in results],
        **extra,
    }


def dumps(doc: Any) -> str:
    """The results as JSON text (headroom.jsonio: NaN/Inf as null)."""
    return jsonio.dumps(doc, indent=2)


def write_json(doc: Any, path: str | Path) -> None:
    """Write atomically (headroom.jsonio): a reader never sees a half-written file."""
    jsonio.write_json(path, doc, indent=2)
