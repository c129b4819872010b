"""Nothing the candidate does reaches the round: the harness's own record of the protocol, the seccomp
filter, the sealed ring, bounded output spans and its temporary files (CPU; docs/verify.md, "Threat
model"). Each attack in tests/cheaters/isolation/ here is the candidate's own code; each must end
``fail``, ``error`` or ``inconclusive`` (or, for the leftover files, leave nothing behind)."""

from __future__ import annotations

import mmap
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

from headroom.verify import VerifyOptions, prepare_reference, sandbox, syscalls, usage, verify_candidate
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


def _cgroup_cpuset() -> bool:
    cg = sandbox.Cgroup(f"headroom-probe-{os.getpid()}", None, None)
    ok = cg.can_freeze and cg.can_set_cpus()
    cg.remove()
    return ok


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
        with pytest.raises(PermissionError):  # F_SEAL_FUTURE_WRITE: no new writable mapping, no write
            mmap.mmap(ring.fd, ring.nbytes)
        with pytest.raises(PermissionError):
            os.pwrite(ring.fd, b"x", 0)
        reopened = os.open(f"/proc/self/fd/{ring.fd}", os.O_RDWR)
        try:
            with pytest.raises(PermissionError):
                mmap.mmap(reopened, ring.nbytes)
        finally:
            os.close(reopened)
        assert os.fstat(ring.fd).st_mode & 0o777 == 0o600
        ring.buf[:4] = 7  # the harness writes through its own mapping
        ring.scrub(2)  # before a gated candidate phase: the last phase's inputs are gone
        assert ring.buf[:4].tolist() == [255, 255, 7, 7]
    finally:
        ring.close()


def test_the_child_maps_the_ring_read_only():
    """The child's view of the ring (``map_ring``, given the descriptor as the pipe would) reads the
    harness's writes and cannot be made writable."""
    import ctypes
    import mmap
    from multiprocessing import reduction

    ring = ring_mod.Ring(1 << 16, "cpu")
    orig = reduction.recv_handle
    try:
        ring.buf[:3] = 9
        reduction.recv_handle = lambda conn: os.dup(ring.fd)
        view = ring_mod.map_ring(ring.spec, "cpu", conn=None)
        assert view[:3].tolist() == [9, 9, 9]
        ring.buf[:3] = 4  # the harness's later writes show through
        assert view[:3].tolist() == [4, 4, 4]
        libc = ctypes.CDLL(None, use_errno=True)
        assert (
            libc.mprotect(
                ctypes.c_void_p(view.data_ptr()), ctypes.c_size_t(mmap.PAGESIZE), mmap.PROT_READ | mmap.PROT_WRITE
            )
            != 0
        )
    finally:
        reduction.recv_handle = orig
        ring.close()


def test_writing_the_ring_through_any_door_is_refused(tmp_path):
    """A writable mapping of its descriptor, write(), a reopen through /proc/self/fd, mprotect: each refused."""
    r = _verify(tmp_path, "attack_ring_write")
    assert_caught(r)
    assert r.verdict == "error" and "refused every write" in r.reason, r.reason
    for door in ("mmap PROT_WRITE", "write", "reopen O_RDWR", "mprotect PROT_WRITE"):
        assert door in r.reason, r.reason


def test_an_input_written_in_place_faults(tmp_path):
    """x.mul_(0) on its input: the child's mapping is read-only, the write faults (once a
    no_input_mutation fail)."""
    r = _verify(tmp_path, "attack_ring_inplace")
    assert_caught(r)
    assert r.verdict in ("error", "fail"), r.reason


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
        "memory_peak_bytes"
    ):
        pytest.skip("no memory cgroup on this machine")
    assert sandbox_info["candidate"]["memory_peak_bytes"] > 512 << 20
    assert [f.name for f in usage.footprint_flags(sandbox_info)] == ["memory_footprint"]
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


def test_a_gpu_candidate_keeps_the_harness_dev_shm_and_a_private_var_tmp():
    # with a private /dev/shm the harness could not map a GPU candidate's CUDA IPC outputs (docs/verify.md)
    assert sandbox.tmpfs_dirs(cuda_plain=False) == ["/var/tmp", "/dev/shm"]
    assert sandbox.tmpfs_dirs(cuda_plain=True) == ["/var/tmp"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: the two timed children share it")
@pytest.mark.skipif(not _cgroup_cpuset(), reason="no writable cgroup cpuset with a freezer")
def test_the_timed_children_never_share_a_core(tmp_path, monkeypatch):
    """Disjoint halves, exchanged every round; the candidate's own widening of its affinity buys no core of
    the reference's (the kernel's view of every task of both children, each round, and its own)."""
    report = open_dir() / f"cpus-{uuid.uuid4().hex[:8]}.json"
    r = _verify(tmp_path, "attack_widen_cpus", env={"HEADROOM_TEST_REPORT": str(report)})
    assert r.verdict in ("pass", "inconclusive"), r.reason
    split = r.timing["cpu_split"]
    a, b = split["reference"], split["candidate"]
    assert split["disjoint"] and split["swapped"] and split["disjoint_in_every_round"], split
    assert a and len(a) == len(b) and not set(a) & set(b), split
    for i, rnd in enumerate(split["by_round"]):
        assert (rnd["reference"], rnd["candidate"]) == ((a, b) if i % 2 == 0 else (b, a)), (i, split)
    seen = [list(s) for s in __import__("json").loads(report.read_text())]
    report.unlink()
    assert seen and all(s in (a, b) for s in seen), (seen, split)  # never both halves at once
    assert sorted(map(tuple, seen)) == sorted([tuple(a), tuple(b)]), seen  # it ran on each half in turn
    cand = r.info["sandbox"]["candidate"]
    assert cand["cpus"] == b and r.info["sandbox"]["reference"]["cpus"] == a, r.info["sandbox"]


def test_the_cpu_split_on_one_cpu_and_on_many(monkeypatch):
    from headroom.verify import cpus

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert cpus.split(None) is None and cpus.for_role("candidate", 1) == ([3], 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(5)))
    assert cpus.split(None) == ([0, 1], [2, 3], None)
    assert cpus.split(1) == ([0], [2], 1) and cpus.split(8) == ([0, 1], [2, 3], 8)
    assert cpus.for_role("reference", 1) == ([0], 1) and cpus.for_role("candidate", 1) == ([2], 1)
    assert cpus.parse_list("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}
