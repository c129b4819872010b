"""Nothing the candidate does reaches the round: the harness's own record of the protocol, the seccomp
filter, the sealed ring, bounded output spans and its temporary files (CPU; docs/verify.md, "Threat
model"). Each attack in tests/cheaters/isolation/ here is the candidate's own code; each must end
``fail``, ``error`` or ``inconclusive`` (or, for the leftover files, leave nothing behind)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
from verify_support import (
    CHEATERS,
    assert_caught,
    one_harness_thread,  # noqa: F401  (autouse fixture)
    open_dir,
)

from headroom.verify import VerifyOptions, prepare_reference, sandbox, syscalls, verify_candidate
from headroom.verify import ring as ring_mod

SEALED = CHEATERS / "isolation"  # not the sealed corpus: scripts/gpu_kernelbench.py runs that one on the GPU
PROBLEM = CHEATERS / "problems" / "gelu_linear.py"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="uid drop and namespaces need a root harness")
needs_x86 = pytest.mark.skipif(not syscalls.supported(), reason="the seccomp filter is written for x86-64")


def _verify(tmp_path, name: str, env: dict | None = None):
    problem = tmp_path / "problem" / PROBLEM.name
    problem.parent.mkdir()
    shutil.copy(PROBLEM, problem)
    cand = open_dir() / f"{name}.py"  # readable by the candidate's uid
    shutil.copy(SEALED / f"{name}.py", cand)
    ref = prepare_reference(problem, VerifyOptions.quick(env=env or {}))
    try:
        return verify_candidate(problem, cand, reference=ref)
    finally:
        ref.close()


def _failed(r) -> set[str]:
    return {c.name for c in r.checks if not c.passed}


def test_a_forged_null_reply_is_tampering_and_buys_no_untimed_command(tmp_path):
    """Patched protocol code in the child: a null phase answered with outputs (which once made the harness
    send an untimed Release, where the candidate computed the next phase's answers from the ring) and a
    silenced integrity snapshot. Whether it holds outputs is the harness's own record."""
    r = _verify(tmp_path, "attack_release_precompute")
    assert_caught(r)
    assert r.verdict == "fail" and "protocol" in _failed(r), r.reason
    assert "null phase" in r.reason


@needs_x86
def test_kernel_timers_are_refused_to_the_candidate(tmp_path):
    """Timers armed in its untimed time would fire on its CPU while the reference is timed."""
    r = _verify(tmp_path, "attack_timer_storm")
    assert_caught(r)
    assert r.verdict == "error" and "timerfd_create refused" in r.reason, r.reason


def test_the_ring_cannot_be_truncated_and_the_harness_survives(tmp_path):
    r = _verify(tmp_path, "attack_ring_truncate")
    assert_caught(r)
    assert r.verdict == "error" and "PermissionError" in r.reason, r.reason


def test_an_output_described_with_a_huge_span_is_refused_unread(tmp_path):
    r = _verify(tmp_path, "attack_output_span")
    assert_caught(r)
    assert r.verdict == "fail" and "strides span" in r.reason, r.reason


@needs_root
def test_files_left_in_shared_temporary_directories_are_gone(tmp_path):
    marker = f"headroom-leftover-{uuid.uuid4().hex[:12]}"
    r = _verify(tmp_path, "attack_tmp_leftover", env={"HEADROOM_TEST_MARKER": marker})
    assert r.verdict in ("pass", "inconclusive"), r.reason  # honest math
    kernel = r.info["sandbox"]["candidate"]["kernel"]
    assert kernel["seccomp"] == (2 if syscalls.supported() else 0)  # read from /proc by the harness
    left = [p for d in ("/tmp", "/var/tmp", "/dev/shm") for p in Path(d).glob(f"{marker}*")]
    assert not left, left


def test_the_ring_is_sealed_and_has_no_path():
    import fcntl

    ring = ring_mod.Ring(1 << 16, "cpu")
    try:
        assert ring.spec.memfd and ring.spec.path is None
        assert fcntl.fcntl(ring.fd, fcntl.F_GET_SEALS) & ring_mod.SEALS == ring_mod.SEALS
        with pytest.raises(PermissionError):
            os.ftruncate(ring.fd, 0)
        assert os.fstat(ring.fd).st_mode & 0o777 == 0o600
        ring.buf[:4] = 7  # the harness writes through its own mapping
        ring.scrub(2)  # before a gated candidate phase: the last phase's inputs are gone
        assert ring.buf[:4].tolist() == [255, 255, 7, 7]
    finally:
        ring.close()


@needs_x86
def test_the_filter_refuses_timers_aio_and_namespaces_and_allows_threads_and_processes():
    import subprocess
    import sys

    code = """
import ctypes, os, signal, subprocess, threading
from headroom.verify import syscalls
assert syscalls.install() is None
libc = ctypes.CDLL(None, use_errno=True)
out = []
out.append(libc.timerfd_create(1, 0) == -1 and ctypes.get_errno() == 1)
out.append(libc.timer_create(1, None, ctypes.byref(ctypes.c_void_p())) == -1)
try:
    signal.setitimer(signal.ITIMER_REAL, 1.0); out.append(False)
except OSError:
    out.append(True)
out.append(libc.syscall(425, 8, None) == -1)  # io_uring_setup
out.append(libc.unshare(0x10000000) == -1)  # CLONE_NEWUSER
t = threading.Thread(target=lambda: None); t.start(); t.join()
out.append(subprocess.run(["true"]).returncode == 0)
print(all(out), out)
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert res.stdout.startswith("True"), (res.stdout, res.stderr)


def test_twice_the_work_is_never_a_speedup(tmp_path):
    """The honest slow control under the pass rule: a pass is a conclusive slowdown near 0.5x, never above 1
    (on a loaded machine it may be inconclusive for noise)."""
    problem = tmp_path / "problem" / PROBLEM.name
    problem.parent.mkdir()
    shutil.copy(PROBLEM, problem)
    ref = prepare_reference(problem, VerifyOptions.quick())
    try:
        r = verify_candidate(problem, CHEATERS / "candidates" / "honest_twice_the_work.py", reference=ref)
    finally:
        ref.close()
    assert not _failed(r), r.reason
    if r.verdict == "pass":
        lo, hi = r.speedup_ci
        assert hi < 1.0 and hi / lo <= 1.25, r.speedup_ci
    else:
        assert r.verdict == "inconclusive", r.reason


def test_memory_held_from_import_is_flagged(tmp_path):
    r = _verify(tmp_path, "attack_import_memory")
    assert not _failed(r), r.reason
    sandbox_info = r.info["sandbox"]
    if not sandbox_info["candidate"].get("memory_peak_bytes") or not (sandbox_info.get("reference") or {}).get(
            "memory_peak_bytes"):
        pytest.skip("no memory cgroup on this machine")
    assert sandbox_info["candidate"]["memory_peak_bytes"] > 512 << 20
    assert [f.name for f in sandbox.footprint_flags(sandbox_info)] == ["memory_footprint"]
    if r.verdict == "pass":  # flags are a pass's (an inconclusive result has none)
        assert "memory_footprint" in {f.name for f in r.flags}, sandbox_info


def test_the_sweep_removes_a_uids_files_but_not_a_build_directory(tmp_path):
    root = tmp_path / "tmp"
    (root / "shared").mkdir(parents=True)
    (root / "build").mkdir()
    for d in (root, root / "shared", root / "build"):
        d.chmod(0o1777)
    uid = os.geteuid()  # the files are this process's: the sweep goes by owner
    (root / "shared" / "left").write_text("x")
    (root / "build" / "ext.so").write_text("y")
    removed = sandbox.sweep_uid(uid, roots=(str(root),), exclude={os.path.realpath(root / "build")})
    assert not (root / "shared").exists() and (root / "build" / "ext.so").exists()
    assert removed >= 1
