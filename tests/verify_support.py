"""Shared by the verify tests: where KernelBench is, quick options, what an honest verdict may be."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from headroom.jsonio import plain

REPO = Path(__file__).resolve().parents[1]
CHEATERS = REPO / "tests" / "cheaters"

# Reasons a correct candidate may be inconclusive on a noisy (shared, loaded) machine.
TIMING_NOISE = (
    "wider than",
    "waited for a CPU",
    "calibrated time",
    "calibrated CPU time",
    "no measurable time",
    "no 95% interval",
    "round orders disagree",
)


# The checks that compare a candidate's outputs with the truth. Which of them catches a wrong or unwritten output
# first depends on the memory the allocator hands back: a stale block can hold the right values during a correctness
# trial and the wrong ones while timed (then only timed_outputs fails). A value cheat's guarantee is its verdict, with
# one of these failed; a test names one check only where no other could catch the cheat.
VALUE_CHECKS = frozenset({"finite", "rel_l2", "allclose", "centred", "exact", "sensitivity", "timed_outputs"})


def failed_checks(r) -> set[str]:
    return {c.name for c in r.checks if not c.passed}


def assert_value_cheat_fails(r, what: object = None, stale: bool = False) -> None:
    """Caught as wrong values: verdict fail, and one of the value checks failed (whichever ran into it first).

    `stale`: a cheat that leaves memory unwritten or reuses an old output. Its trials can read a stale block that
    holds the right values, and then only the timed phases can catch it; a machine too loaded to time them
    ends the run inconclusive first (no check failed, no speedup, every reason a timing one). Where the block the
    allocator hands back holds this very call's right values in every trial and timed iteration (a temporary the
    problem's own math freed: KernelBench's conv_transposed_3D problems 72 and 77 on a CPU), the outputs are right
    wherever they are read and no value check can tell them from an honest write (docs/verify.md, threat model):
    then a pass is accepted only with every value check run and passed."""
    failed = failed_checks(r)
    if stale and r.verdict == "pass":
        ran = {c.name for c in r.checks}
        assert not failed and {"rel_l2", "timed_outputs", "sensitivity"} <= ran, (what, r.reason, failed)
        return
    assert_caught(r)
    if stale and r.verdict == "inconclusive" and not failed:
        assert timing_noise_only(r.reason), (what, r.reason)
        return
    assert r.verdict == "fail" and failed & VALUE_CHECKS, (what, r.verdict, r.reason, failed)


def timing_noise_only(reason: str | None) -> bool:
    """Every part of an inconclusive verdict's reason is timing noise (a shared, loaded machine)."""
    parts = (reason or "").split("; ")
    return all(any(n in p for n in TIMING_NOISE) for p in parts)


def kernelbench_dir() -> Path:
    """KernelBench's files, read in place: $HEADROOM_KERNELBENCH, ../shared/kernelbench (CI), /work/shared."""
    candidates = [
        os.environ.get("HEADROOM_KERNELBENCH"),
        REPO.parent / "shared" / "kernelbench",
        Path("/work/shared/kernelbench"),
    ]
    for c in candidates:
        if c and (Path(c) / "level1").is_dir():
            return Path(c)
    pytest.skip("KernelBench not found: set HEADROOM_KERNELBENCH or put it at ../shared/kernelbench")


def open_dir() -> Path:
    """A directory every uid may write (a candidate runs as an unprivileged uid where the harness is root;
    pytest's tmp_path is closed to it), removed at exit. Not under /tmp, /var/tmp or /dev/shm: what a
    candidate's uid leaves there is removed when its sandbox closes (a probe's report with it)."""
    import atexit
    import shutil
    import tempfile

    base = None
    if os.geteuid() == 0:
        base = "/run/headroom-tests"
        os.makedirs(base, mode=0o711, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="headroom-test-", dir=base))
    d.chmod(0o1777)
    atexit.register(shutil.rmtree, d, True)
    return d


def assert_honest(r) -> None:
    """Correct (no failed check), and either a conclusive pass or inconclusive for timing noise only."""
    failed = [plain(c) for c in r.checks if not c.passed]
    assert not failed, (failed, r.reason)
    assert r.verdict in ("pass", "inconclusive"), r.reason
    if r.verdict == "pass":
        lo, hi = r.speedup_ci
        assert r.speedup > 0 and lo <= r.speedup <= hi
    else:
        assert r.speedup is None
        assert timing_noise_only(r.reason), r.reason


def assert_caught(r) -> None:
    """Never a pass, never a speedup."""
    assert r.verdict in ("fail", "error", "inconclusive"), (r.verdict, r.reason)
    assert r.speedup is None and r.speedup_fp32 is None


@pytest.fixture(scope="module", autouse=True)
def one_harness_thread():
    """The harness's own torch ops single-threaded (import into a test module to use): the children are
    frozen while it works, and a shared 2-core machine punishes OpenMP spinning."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
