"""Attacks on the harness itself, as a reward-hacking candidate would try them (CPU).

Each must end ``fail``, ``error`` or ``inconclusive`` — never a ``pass`` with a speedup: forged and
unrequested messages, rewritten pipes, early exit, snooping for seeds, an unreadable process, a
process that escapes with setsid, a loaded machine, and builds (outside the clock).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from verify_support import (
    CHEATERS,
    REPO,
    assert_caught,
    assert_honest,
    one_harness_thread,  # noqa: F401  (autouse fixture)
    open_dir,
)

from headroom.verify import Policy, VerifyOptions, prepare_reference, verify_candidate

PROBLEM = CHEATERS / "problems" / "gelu_linear.py"
CANDIDATES = CHEATERS / "candidates"


@pytest.fixture(scope="module")
def ref():
    r = prepare_reference(PROBLEM, VerifyOptions.quick())
    yield r
    r.close()


def _run(ref, name: str, **options):
    saved = ref.options
    ref.options = VerifyOptions.quick(**options)
    try:
        return verify_candidate(PROBLEM, CANDIDATES / f"{name}.py", reference=ref)
    finally:
        ref.options = saved


def _failed(r) -> set[str]:
    return {c.name for c in r.checks if not c.passed}


def test_forged_timing_reply_is_tampering(ref):
    """Stack walking finds the pipe and the Run command; the forged RunDone names one output for every
    iteration, and the real reply arrives later: the samples do not match, or the message is unrequested."""
    r = _run(ref, "attack_forge_timing")
    assert_caught(r)
    assert r.verdict == "fail" and _failed(r) & {"timed_outputs", "protocol"}, (r.reason, _failed(r))


def test_forged_reply_then_exit_is_caught(ref):
    r = _run(ref, "attack_forge_timing", env={"HEADROOM_ATTACK_EXIT": "1"})
    assert_caught(r)
    assert r.verdict in ("fail", "error")
    assert _failed(r) & {"timed_outputs", "protocol"} or "exited" in (r.reason or "") or "killed" in (r.reason or "")


def test_rewriting_every_number_in_every_pipe_is_caught(ref):
    """3x the work, and every float/uint in every outgoing frame rewritten: addresses no longer point at
    the outputs, and the patched connection method is itself evidence."""
    r = _run(ref, "attack_pipe_rewrite")
    assert_caught(r)
    assert r.verdict == "fail" and _failed(r) & {"integrity", "protocol", "output_type", "rel_l2"}, r.reason


def test_snooping_finds_no_seed_plan_or_future_input(ref, tmp_path):
    report = open_dir() / "snoop.json"
    r = _run(ref, "attack_snoop", env={"HEADROOM_TEST_REPORT": str(report)})
    found = json.loads(report.read_text())
    # the one seed in the child is the construction seed, public by design (the candidate gets the
    # reference's weights through it); no trial, phase or position seed, plan or future input
    assert all(item.endswith(f"={ref.init_seed}") for item in found["found"]), found
    assert_caught(r)
    assert r.verdict == "fail" and "rel_l2" in _failed(r)


def test_unrequested_message_is_tampering(ref):
    r = _run(ref, "attack_unrequested")
    assert r.verdict == "fail" and "protocol" in _failed(r), r.reason
    detail = next(c.detail for c in r.checks if c.name == "protocol")
    assert "did not ask for" in detail or "out-of-order" in detail, detail


def test_unreadable_process_is_tampering(ref):
    """Non-dumpable: an unprivileged harness cannot read its memory (tampering); a privileged one
    (CAP_SYS_PTRACE, e.g. root in a container) still can, and then the attack changes nothing."""
    r = _run(ref, "attack_undumpable")
    if os.geteuid() == 0:
        assert_honest(r)
    else:
        assert r.verdict == "fail" and "protocol" in _failed(r), r.reason
        assert "cannot read the child's memory" in r.reason


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # the escaped process loads a core for the whole run (a minute or more on 2 cores)
def test_fork_setsid_escape_is_killed_and_fails(tmp_path):
    """Through the CLI, with stdout a pipe: the command returns (nothing holds the pipe), the verdict
    is fail (containment) and the setsid grandchild is dead."""
    pidfile = open_dir() / "pid"
    env = {**os.environ, "HEADROOM_TEST_PIDFILE": str(pidfile)}
    t0 = time.monotonic()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "headroom.cli",
            "verify",
            str(PROBLEM),
            str(CANDIDATES / "attack_fork_setsid.py"),
            "--json",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--rounds",
            "6",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=240,
    )
    assert time.monotonic() - t0 < 240
    doc = json.loads(p.stdout[p.stdout.index("{") :])
    assert p.returncode == 1 and doc["verdict"] == "fail", doc["reason"]
    containment = next(c for c in doc["checks"] if c["name"] == "containment")
    assert not containment["passed"] and "still running" in containment["detail"]
    pid = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert not _alive(pid), f"the escaped process {pid} survived"


def test_reference_under_a_cpu_load_generator_is_inconclusive(ref):
    """KernelBench's reference as its own candidate while other processes load every core: the
    harness sees its children wait for a CPU and refuses to call a speedup."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        time.sleep(0.5)
        r = _run(
            ref,
            "honest_reimplementation",
            policy=Policy(rounds=6, calibration_phases=3, target_phase_ms=3.0, max_iters=20, samples_per_output=64),
        )
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert not _failed(r), r.reason
    assert r.verdict == "inconclusive" and r.speedup is None, (r.verdict, r.speedup, r.timing.get("wait_fraction"))
    # Which symptom a load shows depends on how the scheduler shares the cores: children that wait
    # for a CPU, an interval too wide, a reference that slowed since calibration, or phases shorter
    # than an overhead calibrated under load (a 2-core CI runner gave the last two). Each reason must
    # be one of those timing symptoms, never anything else.
    symptoms = (
        "waited for a CPU",
        "wider than",
        "changed speed while it was measured",
        "too fast to time",
        "give no 95% interval",
        "round orders disagree",
        "calibrated CPU time",
    )
    assert r.timing["inconclusive"], r.reason
    for reason in r.timing["inconclusive"]:
        assert any(s in reason for s in symptoms), reason


def test_honest_on_a_quiet_machine_passes_with_an_interval_around_one(ref):
    """The same math written differently, default judgement: a pass with a CI containing ~1x when the
    harness saw no load; when it did, it must say so (inconclusive), never fail."""
    r = _run(
        ref,
        "honest_reimplementation",
        policy=Policy(rounds=8, calibration_phases=3, target_phase_ms=10.0, max_iters=50, samples_per_output=64),
    )
    assert_honest(r)
    quiet = all(w <= 0.3 for w in r.timing["wait_fraction"].values())
    if r.verdict == "pass":
        lo, hi = r.speedup_ci
        assert lo < 1.6 and hi > 0.6 and hi / lo <= 1.25
    else:
        # inconclusive on a quiet machine only for a named timing reason: an interval too wide, or
        # phases too short for the calibrated clock overhead (a 2-core CI runner gave that one)
        assert not quiet or any(
            s in r.reason
            for s in (
                "wider than",
                "calibrated time",
                "too fast to time",
                "round orders disagree",
                "calibrated CPU time",
            )
        ), r.reason


def _compiler() -> None:
    from torch.utils.cpp_extension import verify_ninja_availability

    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler for load_inline")
    try:
        verify_ninja_availability()
    except RuntimeError:
        pytest.skip("ninja is not installed (load_inline needs it)")


@pytest.mark.slow  # a C++ extension compiled by load_inline: two minutes on 2 cores
def test_load_inline_candidate_is_built_outside_the_clock(ref, tmp_path):
    _compiler()
    r = _run(ref, "honest_inline_cpp", build_dir=str(tmp_path / "build"), build_timeout=400, timeout=120)
    assert r.build is not None and r.build["ok"] and r.build["seconds"] > 1.0
    assert_honest(r)
    assert (tmp_path / "build" / "torch_extensions").is_dir()  # the per-run cache the child loaded from


def test_build_failure_is_an_error_with_the_compilers_first_lines(ref, tmp_path):
    _compiler()
    r = _run(ref, "broken_inline_cpp", build_dir=str(tmp_path / "build"), build_timeout=400)
    assert r.verdict == "error" and r.build is not None and not r.build["ok"]
    assert "the build failed" in r.reason and "headroom_missing_header.h" in r.reason, r.reason
