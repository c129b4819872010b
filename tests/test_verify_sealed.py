"""The sealed harness: a candidate reaches nothing but its own inputs and outputs (CPU).

Each attack in tests/cheaters/sealed/ got an unfair speedup from the harness before it was sealed
(docs/verify.md, "Threat model"); here each must be refused or caught. The attacks that reach the
reference (a stopper sibling, planted bytecode, its memory) run against a reference prepared for
the test alone: the reference's child is kept between candidates. Where the machine lacks a
mechanism (no cgroups, not root) the tests that need it are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from verify_support import (
    CHEATERS,
    assert_caught,
    assert_honest,
    one_harness_thread,  # noqa: F401  (autouse fixture)
    open_dir,
)

from headroom.verify import VerifyOptions, prepare_reference, sandbox, usage, verify_candidate

SEALED = CHEATERS / "sealed"
PROBLEM = CHEATERS / "problems" / "gelu_linear.py"
HONEST = CHEATERS / "candidates" / "honest_reimplementation.py"


def _cgroups() -> bool:
    cg = sandbox.Cgroup(f"headroom-probe-{os.getpid()}", None, None)
    ok = cg.can_freeze
    cg.remove()
    return ok


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="uid drop and namespaces need a root harness")
needs_cgroup = pytest.mark.skipif(not _cgroups(), reason="no writable cgroup hierarchy with a freezer")


def _failed(r) -> set[str]:
    return {c.name for c in r.checks if not c.passed}


def _attack(tmp_path, name: str, **options):
    """One attack against a fresh reference of a private copy of the problem; (result, report text)."""
    problem = tmp_path / "problem" / PROBLEM.name
    problem.parent.mkdir()
    shutil.copy(PROBLEM, problem)
    report = open_dir() / "report"
    env = {
        "HEADROOM_SEALED_DIR": str(SEALED),
        "HEADROOM_TEST_REPORT": str(report),
        "HEADROOM_TEST_PROBLEM": str(problem),
        **options.pop("env", {}),
    }
    ref = prepare_reference(problem, VerifyOptions.quick(env=env, **options))
    try:
        r = verify_candidate(problem, SEALED / f"{name}.py", reference=ref)
    finally:
        ref.close()
    return r, (report.read_text() if report.exists() else "")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@needs_cgroup
def test_clone_parent_sibling_is_frozen_contained_and_killed(tmp_path):
    """clone(CLONE_PARENT) makes the fork server's child, not the candidate's: it stays in the
    candidate's cgroup, so it is frozen with it, counted as a stray and killed."""
    r, _ = _attack(tmp_path, "attack_clone_parent")
    assert_caught(r)
    assert r.verdict == "fail" and "containment" in _failed(r), r.reason
    detail = next(c.detail for c in r.checks if c.name == "containment")
    pids = [int(p) for p in detail.split("[", 1)[1].split("]", 1)[0].split(",")]
    time.sleep(0.5)
    assert not any(_alive(p) for p in pids), detail


@needs_root
def test_fork_server_is_out_of_reach(tmp_path):
    """The fork server's socket is the harness's (mode 0600 in a 0700 directory) and its 'alive'
    descriptor is closed in the child: a request for a process fails before any process exists."""
    r, _ = _attack(tmp_path, "attack_forkserver")
    assert_caught(r)
    assert r.verdict == "error" and "during import" in r.reason, r.reason
    assert "Permission denied" in r.reason, r.reason


def test_a_fork_server_process_the_candidate_asked_for_is_a_stray(tmp_path, monkeypatch):
    """With the harness's uid and network namespace (a GPU's default seal) the candidate finds the fork
    server's socket and gets a process from it, outside its cgroup: the fork server's children that
    are no child of the harness are strays, stopped and killed."""
    monkeypatch.setenv(sandbox.OFF_ENV, "uid,ns")
    r, _ = _attack(tmp_path, "attack_forkserver")
    assert_caught(r)
    assert r.verdict == "fail" and "containment" in _failed(r), r.reason
    detail = next(c.detail for c in r.checks if c.name == "containment")
    pids = [int(p) for p in detail.split("[", 1)[1].split("]", 1)[0].split(",")]
    time.sleep(0.5)
    assert not any(_alive(p) for p in pids), detail


def test_a_candidate_that_stops_the_fork_server_fails_and_the_server_is_replaced(tmp_path, monkeypatch):
    """probe_reach with the harness's uid connects to the fork server and hangs up, which ends the
    server's loop (its process lingers, not listening): the harness sees the socket no longer listen,
    starts another, and the candidate fails containment with the reason. The next candidate verifies."""
    from headroom.verify import process

    monkeypatch.setenv(sandbox.OFF_ENV, "uid,ns")
    lost = len(process.FORK_SERVER_LOST)
    r, report = _attack(tmp_path, "probe_reach")
    assert json.loads(report)["connect_fork_server"] == "ok", report
    assert r.verdict == "fail" and "containment" in _failed(r), r.reason
    assert "fork server stopped serving while the candidate ran" in r.reason, r.reason
    assert len(process.FORK_SERVER_LOST) == lost + 1 and process.fork_server_ok()
    monkeypatch.delenv(sandbox.OFF_ENV)
    assert_honest(verify_candidate(PROBLEM, HONEST, VerifyOptions.quick()))


@needs_root
def test_mount_over_proc_is_refused(tmp_path):
    """An unprivileged uid cannot mount; had it been able to, the mount would be in its own namespace."""
    r, _ = _attack(tmp_path, "attack_mount_proc")
    assert_caught(r)
    assert r.verdict == "error" and "refused: Operation not permitted" in r.reason, r.reason


@needs_root
def test_reference_memory_is_out_of_reach(tmp_path):
    """The candidate's uid cannot open the reference's /proc/<pid>/mem: the attack never happens and
    the candidate is timed as what it is (honest math)."""
    r, report = _attack(tmp_path, "attack_reference_memory")
    assert "refused: PermissionError" in report and "zeroed" not in report, report
    assert_honest(r)


@needs_root
def test_planted_bytecode_does_not_reach_the_reference(tmp_path):
    """The reference imports a private copy (no bytecode written or read there); the problem's own
    directory is closed to the candidate's uid."""
    r, report = _attack(tmp_path, "attack_plant_pyc")
    assert "refused" in report and str(tmp_path) in report, report
    assert not (tmp_path / "problem" / "__pycache__").exists()
    assert_honest(r)


@needs_root
def test_the_child_holds_nothing_of_the_harness(tmp_path):
    r, report = _attack(tmp_path, "probe_reach")
    assert_honest(r)
    got = json.loads(report)
    kinds = [t for t in got["fds"].values() if t.startswith(("pipe:", "socket:")) or t.startswith("/")]
    # stdin (/dev/null), the log twice, the command pipe: no fork-server, tracker or sentinel pipe
    assert len([t for t in kinds if t.startswith(("pipe:", "socket:"))]) == 1, got["fds"]
    assert got["uid"] != 0 and got["uid"] == r.info["sandbox"]["candidate"]["uid"]
    # multiprocessing keeps no number of a descriptor the sealing closed (reused by CUDA's device files)
    helpers = got["helpers"]
    assert helpers["fork_server_address"] is None and helpers["fork_server_alive_fd"] is None, helpers
    assert got["fds"][str(helpers["resource_tracker_fd"])] == "/dev/null", got["fds"]
    for key in ("signal_parent", "signal_harness", "read_harness_mem", "connect_fork_server", "write_problem"):
        assert got[key] != "ok", (key, got)
    kernel = r.info["sandbox"]["candidate"]["kernel"]
    assert kernel["own_mnt_namespace"] and kernel["own_net_namespace"] and kernel["no_new_privs"], kernel


@needs_cgroup
def test_both_children_get_the_same_cpus_and_quota(tmp_path):
    """--threads 1: each child confined to one CPU of its own (disjoint, where there are two) with a
    one-CPU quota; the candidate's extra threads buy nothing, and its CPU per forward is accounted by cgroup."""
    r, report = _attack(tmp_path, "attack_threads", threads=1)
    sb = r.info["sandbox"]
    assert [int(c) for c in report.split(",")] == sb["candidate"]["cpus"], report
    if "reference" in sb:
        assert len(sb["candidate"]["cpus"]) == len(sb["reference"]["cpus"]) == 1
        if len(os.sched_getaffinity(0)) >= 2:
            assert not set(sb["candidate"]["cpus"]) & set(sb["reference"]["cpus"]), sb
        assert sb["candidate"]["cpu_quota"] == sb["reference"]["cpu_quota"] == 1
    if "cpu" in sb:
        assert sb["cpu"]["candidate"]["parallelism"] <= 1.0 * usage.CPU_SLACK + 0.1, sb["cpu"]
    assert r.speedup is None or r.speedup < 1.5


def test_more_cpus_than_allowed_is_flagged():
    info = {
        "cpu": {
            "candidate": {"parallelism": 1.9, "cpu_ms_per_forward": 2.0, "forwards": 10},
            "reference": {"parallelism": 0.95},
            "allowed_cpus": 1,
        }
    }
    flags = usage.cpu_flags(info)
    assert [f.name for f in flags] == ["cpu"] and "1.90 CPUs" in flags[0].detail
    info["cpu"]["candidate"]["parallelism"] = 1.0
    assert usage.cpu_flags(info) == []


def test_honest_candidate_unsealed_still_verifies(monkeypatch):
    """Every mechanism off (a machine without cgroups, namespaces or root): the current behaviour,
    with the notes saying what is missing."""
    monkeypatch.setenv(sandbox.OFF_ENV, "all")
    r = verify_candidate(PROBLEM, HONEST, VerifyOptions.quick())
    assert_honest(r)
    assert any("off" in n for n in r.info["sandbox"]["candidate"]["notes"]), r.info["sandbox"]


def test_a_broken_mechanism_is_a_note_not_a_crash(monkeypatch):
    def broken(*a, **k):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(sandbox, "Cgroup", broken)
    r = verify_candidate(PROBLEM, HONEST, VerifyOptions.quick())
    assert_honest(r)
    assert any("Function not implemented" in n for n in r.info["sandbox"]["candidate"]["notes"])


def test_a_harness_exception_is_an_error_verdict(monkeypatch):
    """A bug in the harness ends in verdict error with its reason, not an exception out of verify."""
    from headroom.verify import candidate as cand_mod

    def boom(*a, **k):
        raise TypeError("'Job' object is not subscriptable")

    monkeypatch.setattr(cand_mod.cmp, "sensitivity", boom)
    r = verify_candidate(PROBLEM, HONEST, VerifyOptions.quick())
    assert_caught(r)
    assert r.verdict == "error" and r.reason.startswith("harness error: TypeError"), r.reason


@needs_cgroup
@pytest.mark.parametrize("without", ["v2", "uid"])
def test_clone_parent_sibling_is_caught_by_the_cgroup_alone(tmp_path, monkeypatch, without):
    """Without cgroup v2 (the v1 freezer freezes), or with the candidate still root: the sibling is
    in the candidate's cgroup all the same."""
    monkeypatch.setenv(sandbox.OFF_ENV, without)
    r, _ = _attack(tmp_path, "attack_clone_parent")
    assert_caught(r)
    assert r.verdict == "fail" and "containment" in _failed(r), r.reason


@needs_root
def test_a_root_candidates_mount_stays_in_its_namespace(tmp_path, monkeypatch):
    """With the uid drop off the candidate may mount, but only in its own mount namespace: the
    harness's /proc still shows its forked child, which is frozen, counted and killed."""
    monkeypatch.setenv(sandbox.OFF_ENV, "uid")
    r, _ = _attack(tmp_path, "attack_mount_proc")
    assert_caught(r)
    assert r.verdict == "fail" and "containment" in _failed(r), r.reason


def test_reference_and_candidate_compile_caches_are_private(tmp_path):
    """--vs-compile: the reference's inductor and triton caches are in a directory of its own (an
    entry planted in the default cache, or the candidate's, is never read by it)."""
    from headroom.verify import protocol as P

    def job(role, candidate=None):
        return P.Job(
            role=role,
            problem=str(PROBLEM),
            overrides={},
            candidate=candidate,
            device="cpu",
            env={},
            threads=1,
            log_path=str(tmp_path / f"{role}.log"),
            file_cap_bytes=1 << 30,
            init_seed=0,
        )

    made = [sandbox.Sandbox.for_job(job("reference"), "r"), sandbox.Sandbox.for_job(job("candidate", str(HONEST)), "c")]
    try:
        (rs, rjob), (cs, cjob) = made
        if rs.dir is None:
            pytest.skip("; ".join(rs.notes))
        for key in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
            assert rjob.env[key].startswith(rs.dir + os.sep) and cjob.env[key].startswith(cs.dir + os.sep)
        assert rjob.problem.startswith(rs.dir + os.sep) and not os.path.exists(
            os.path.join(os.path.dirname(rjob.problem), "__pycache__")
        )
        assert rjob.env["PYTHONDONTWRITEBYTECODE"] == "1"
        assert os.stat(rs.dir).st_mode & 0o077 == 0  # closed to every other uid
    finally:
        for s, _ in made:
            s.close()


@needs_cgroup
def test_an_unconfirmed_freeze_still_thaws(monkeypatch):
    """A freeze the kernel does not confirm in time (a loaded machine) stops the members as well,
    and the next thaw undoes both: no child is left frozen while the harness waits for it."""
    monkeypatch.setattr(sandbox.Cgroup, "_wait", staticmethod(lambda done, limit=2.0: False))
    r = verify_candidate(PROBLEM, HONEST, VerifyOptions.quick(timeout=60))
    assert_honest(r)
    assert any("not confirmed" in n for n in r.info["sandbox"]["candidate"]["notes"]), r.info["sandbox"]


def test_trials_and_timed_phases_share_one_global_state(tmp_path):
    """probe_state: the memory measurement, every trial and every timed forward see one torch global
    state (the child also checks it at every call: ``child._Calls``), whatever the command."""
    r, report = _attack(tmp_path, "probe_state")
    assert_honest(r)
    rows = [line.split() for line in report.splitlines()]
    kinds = {k for k, _, _ in rows}
    assert {"Memory", "Trial", "Run"} <= kinds, kinds
    assert len({h for k, h, _ in rows if k != "Launches"}) == 1, rows
    # Whether a fresh buffer reads as NaN is up to the allocator (a CPU's malloc hands a released block back
    # to some allocations only: 0 of about 40 in some runs), so it is not asserted here; what the child
    # writes into a released output is (test_verify_unit: test_released_outputs_are_poisoned_...).


@pytest.mark.parametrize("name", ["attack_trial_flags", "attack_trial_snapshot"])
def test_no_state_is_trial_only(tmp_path, name):
    """Honest only under state seen in trials alone (the deterministic flags; any hashed difference):
    there is none, so it answers coarsely in its trials too, and fails them."""
    r, _ = _attack(tmp_path, name)
    assert_caught(r)
    assert r.verdict == "fail" and "rel_l2" in _failed(r), r.reason


def test_a_candidate_that_reads_its_command_is_caught_while_timed(tmp_path):
    """attack_trial_frame tells a Trial from a Run by its caller's frame (no harness can hide that in
    one process) and answers coarsely while timed: the sampled relative L2 check catches it."""
    r, _ = _attack(tmp_path, "attack_trial_frame")
    assert_caught(r)
    assert r.verdict == "fail" and _failed(r) == {"timed_outputs"}, r.reason
    assert "sampled relative L2 error" in r.reason and "less precise while timed" in r.reason, r.reason


def test_a_state_change_between_calls_is_an_error_with_the_reason(tmp_path):
    """The state check is never silent: state changed outside the model's calls ends in error, with the field."""
    r, _ = _attack(tmp_path, "attack_state_between_calls")
    assert_caught(r)
    assert r.verdict == "error", (r.verdict, r.reason)
    assert "harness self-check: torch's global state changed between two calls" in r.reason, r.reason
    assert "warning_filters: " in r.reason, r.reason


def test_the_coarse_answer_is_a_cheat_against_each_devices_gates():
    """_tell.coarse: 10 mantissa bits on a CPU (10x the float32 gate); on CUDA under TF32 10 bits is the
    reference's own precision (the trial attacks passed on the H200 with it, kernelbench_l1.e), so 6:
    beyond the H200's measured trial gate and timed bound in relative L2, inside the sampled per-element
    check (4x the per-element gate)."""
    import gzip
    import sys
    import types

    import torch

    from headroom.verify import checks as ck

    sys.path.insert(0, str(SEALED))
    try:
        import _tell
    finally:
        sys.path.remove(str(SEALED))
    prec = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert _tell.bits_for(types.SimpleNamespace(is_cuda=True)) == 6
        assert _tell.bits_for(torch.zeros(1)) == 10
    finally:
        torch.set_float32_matmul_precision(prec)
    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(128, 96)
    y = torch.nn.functional.gelu(lin(torch.randn(256, 128, generator=g))).detach()
    rms = float(y.pow(2).mean().sqrt())

    def errors(bits):
        c = _tell.coarse(y, bits)
        return float((c - y).pow(2).mean().sqrt()) / rms, float(((c - y).abs() / (y.abs() + rms)).max())

    assert errors(10)[0] > 5 * ck.FLOORS["float32"][0]
    e = json.loads(gzip.decompress((CHEATERS.parents[1] / "docs/gpu/measure/kernelbench_l1.e.json.gz").read_bytes()))
    frame = next(r for r in e["results"] if r["candidate"].endswith("attack_trial_frame.py"))
    gates = [gs[0] for gs in frame["info"]["gates"]]
    ref = max(gt["reference_error"]["rel_l2"] for gt in gates)
    bound = ck.timed_l2_bound(max(gt["rel_l2"] for gt in gates), frame["info"]["max_rel_l2"], ref)
    assert errors(10)[0] < ref  # TF32's own precision: no cheat there
    rel6, elem6 = errors(6)
    assert rel6 > 2 * bound and rel6 > 2 * max(gt["rel_l2"] for gt in gates), (rel6, bound)
    assert elem6 < ck.TIMED_SLACK * min(gt["elem"] for gt in gates), elem6


@needs_cgroup
def test_a_reference_written_by_the_candidate_fails_it_against_the_truth(tmp_path, monkeypatch):
    """With the harness's uid on a CPU the candidate can write the reference child's memory:
    attack_reference_memory zeroes its weights and returns zeros, which match the reference's timed
    outputs. A sampled timed iteration of the reference checked against the harness's truth fails the
    candidate (`containment`, with the errors), and the written child is not kept: the next candidate
    gets a fresh reference and verifies."""
    monkeypatch.setenv(sandbox.OFF_ENV, "uid,ns")
    problem = tmp_path / "problem" / PROBLEM.name
    problem.parent.mkdir()
    shutil.copy(PROBLEM, problem)
    report = open_dir() / "report"
    env = {"HEADROOM_SEALED_DIR": str(SEALED), "HEADROOM_TEST_REPORT": str(report)}
    ref = prepare_reference(problem, VerifyOptions.quick(env=env))
    try:
        r = verify_candidate(problem, SEALED / "attack_reference_memory.py", reference=ref)
        text = report.read_text() if report.exists() else ""
        if "zeroed" not in text:
            pytest.skip(f"this machine keeps /proc/<pid>/mem of a sibling out of reach: {text.strip()}")
        assert r.verdict == "fail" and _failed(r) == {"containment"}, r.reason
        assert "the reference's timed output differs from the truth" in r.reason, r.reason
        assert "the reference was tampered with" in r.reason, r.reason
        found = r.reason.split("sampled relative L2 error ", 1)[1]
        rel, gate = float(found.split(" ", 1)[0]), float(found.split("(gate ", 1)[1].split(")", 1)[0])
        # far beyond any honest reference's error; how far depends on how much of the weights the attack had
        # zeroed by the sampled iteration (about 1 when all of them)
        assert rel > 1000 * gate, r.reason
        written = ref.timing.child.pid
        assert ref.timing.tampered
        h = verify_candidate(problem, HONEST, reference=ref)
        assert_honest(h)
        assert ref.timing.child.pid != written and not ref.timing.tampered
        truth = h.timing["reference_truth"]
        assert truth["checks"] == h.timing["rounds"] + 1 and truth["skipped"] == 0  # the warm-up and every round
    finally:
        ref.close()


def test_the_reference_truth_check_passes_the_reference_and_catches_a_written_one():
    """session._reference_truth on a phase of the reference's own samples (its float32 forward) and on a
    phase of zeros (what a reference with zeroed weights returns), at the same drawn positions."""
    import types

    import torch

    from headroom.verify import checks as ck
    from headroom.verify import session

    ref = prepare_reference(PROBLEM, VerifyOptions.quick())
    try:
        policy = ref.policy
        sets = session.fresh_sets(ref, "test", 3)
        outs = [ref.model(*xs).detach() for xs in sets]

        def phase(values):
            pos = [session._positions(7, k, 0, o.numel(), policy.samples_per_output) for k, o in enumerate(outs)]
            samples = [[values(o).reshape(-1)[torch.as_tensor(p)]] for o, p in zip(outs, pos)]
            shapes = [[("float32", tuple(o.shape))] for o in outs]
            return session.Phase(1.0, 0.1, 0.1, None, False, False, 0.0, samples, shapes, 7, [], [0, 1, 2])

        rt = types.SimpleNamespace(truth_checks=0, truth_ms=0.0, truth_skipped=0)
        gates = [ck.gates_for(torch.float32, None)]
        assert session._reference_truth(ref, rt, phase(lambda o: o), sets, gates, policy, "a") is None
        bad = session._reference_truth(ref, rt, phase(torch.zeros_like), sets, gates, policy, "b")
        assert bad is not None and "sampled relative L2 error" in bad, bad
        assert float(bad.split("error ", 1)[1].split(" ", 1)[0]) > 0.5, bad
        assert rt.truth_checks == 2
    finally:
        ref.close()


def test_a_reference_off_the_truth_at_warm_up_is_an_error_and_not_kept(monkeypatch):
    """Before the candidate's timing (the warm-up phase) the cause may be an earlier candidate that
    shared the reference's child: verdict error with the reason, and the child is replaced. Here the
    harness's truth is made wrong (twice the true values) for the warm-up alone."""
    from headroom.verify import timed_checks

    real = timed_checks.timed_truth
    calls = []

    def wrong_first(ref, xs):
        calls.append(1)
        out = real(ref, xs)
        return [2 * t for t in out] if len(calls) == 1 else out

    monkeypatch.setattr(timed_checks, "timed_truth", wrong_first)
    ref = prepare_reference(PROBLEM, VerifyOptions.quick())
    try:
        r = verify_candidate(PROBLEM, HONEST, reference=ref)
        assert r.verdict == "error", r.reason
        assert "the reference's warm-up timed output differs from the truth" in r.reason, r.reason
        assert "before the candidate was timed" in r.reason and "sampled relative L2 error" in r.reason, r.reason
        first = ref.timing.child.pid
        assert ref.timing.tampered
        assert_honest(verify_candidate(PROBLEM, HONEST, reference=ref))
        assert ref.timing.child.pid != first
    finally:
        ref.close()
