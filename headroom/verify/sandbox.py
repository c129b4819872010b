"""Sealing a verify child: its own cgroup, namespaces, uid, descriptors and private files.

The harness builds a ``Sandbox`` for each child before starting it (``process.Child``); the plan
travels to the child in its job's environment (``SEAL_ENV``) and the child applies it in
``child._isolate`` — before any problem or candidate code runs:

* **cgroup** (``Cgroup``): one per child — cgroup v2 (``cgroup.freeze``, ``cgroup.kill``,
  ``cpu.stat``) where a cgroup2 hierarchy is mounted and writable, and the v1 ``freezer``, ``cpu``,
  ``cpuacct``, ``cpuset`` and ``pids`` controllers where mounted. Membership is inherited by every
  process the child starts, whatever its parent (``clone(CLONE_PARENT)``, ``setsid``, a double
  fork): the harness freezes, counts, accounts and kills by cgroup, so no relative escapes.
  The two timed children get disjoint CPU sets of the same size (``cpus``) and the same CFS quota.
* **namespaces**: a private mount namespace (a mount the child makes is invisible to the harness's
  /proc) and a network namespace (no socket of the host's, abstract ones included, is reachable).
* **descriptors**: every inherited pipe, socket, file and directory is closed but the command pipe
  and stdio — the fork server's and the resource tracker's included.
* **uid**: candidate and build children drop to an unprivileged uid of their own
  (``setresuid``; ``PR_SET_NO_NEW_PRIVS``), so they cannot ptrace or write the reference's or the
  harness's memory, signal them, write their files or leave their cgroup; the reference stays
  with the harness's uid.
* **files**: each child imports a private copy of the problem (and candidate) from a directory of
  its own, with no bytecode written (``PYTHONDONTWRITEBYTECODE``) and none there to read, and has a
  private HOME, TMPDIR and inductor/triton cache (unless the job names a build directory).

Every mechanism is probed; where one is missing (no cgroup hierarchy, not root, no namespaces) the
child runs as before and the sandbox records a note (``VerifyResult.info["sandbox"]``). psutil
offers none of this (it reads processes; it does not create cgroups or namespaces), hence the
direct /sys/fs/cgroup writes and ``unshare``/``mount`` through libc.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

from headroom.verify import cpus as cpu_sets
from headroom.verify import syscalls
from headroom.verify.cgroup import OFF_ENV, Cgroup, _read, off  # noqa: F401  (re-exported)
from headroom.verify.sandbox_child import SEAL_ENV, enter, keep_fd, lock  # noqa: F401  (re-exported: the child's half)

# On a GPU the uid drop and the network namespace are opt-in until CUDA IPC across uids and
# network namespaces is verified on the H200: a failure there would make every candidate an error.
CUDA_UID_ENV = "HEADROOM_VERIFY_SEAL_CUDA_UID"
UID_BASE = 1_500_000_000  # unprivileged uids with no passwd entry, one per candidate
UID_SPAN = 1_000_000
_LOCK = threading.Lock()
_RUN_ROOT: str | None = None


# --- the plan for one child (harness side) -----------------------------------------------------


def _run_root() -> str:
    """This harness's directory of private child directories (traversable, not listable)."""
    global _RUN_ROOT
    with _LOCK:
        if _RUN_ROOT is None or not os.path.isdir(_RUN_ROOT):
            _RUN_ROOT = tempfile.mkdtemp(prefix=f"headroom-seal-{os.getpid()}-")
            os.chmod(_RUN_ROOT, 0o711)
            import atexit

            atexit.register(shutil.rmtree, _RUN_ROOT, True)
        return _RUN_ROOT


def _world_readable(path: str) -> bool:
    import stat

    p = os.path.realpath(path)
    try:
        if not os.stat(p).st_mode & stat.S_IROTH:
            return False
        d = os.path.dirname(p)
        while True:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
            if d == "/":
                return True
            d = os.path.dirname(d)
    except OSError:
        return False


def can_drop_uid() -> bool:
    return os.geteuid() == 0 and hasattr(os, "setresuid") and not off("uid")


def candidate_uid(job: Any) -> int:
    """One unprivileged uid per candidate file and harness (its build child and verify child share it)."""
    key = f"{os.getpid()}:{os.path.realpath(job.candidate or job.problem)}".encode()
    return UID_BASE + zlib.crc32(key) % UID_SPAN


fair_cpus = cpu_sets.shared  # one set for both (one CPU); ``cpus.for_role`` splits where there are two


@dataclass
class Sandbox:
    role: str
    name: str
    notes: list = field(default_factory=list)
    uid: int | None = None
    dir: str | None = None
    cgroup: Cgroup | None = None
    cpus: list = field(default_factory=list)
    quota_cpus: int | None = None
    plan: dict = field(default_factory=dict)
    verified: dict = field(default_factory=dict)
    frozen_by_cgroup: bool = False

    @classmethod
    def for_job(cls, job: Any, label: str) -> tuple[Sandbox, Any]:
        """The sandbox of a child about to start and the job it starts with (private copies, plan)."""
        import msgspec

        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:80]
        sb = cls(job.role, f"headroom-{os.getpid()}-{safe}-{os.urandom(3).hex()}")
        try:
            return sb, msgspec.structs.replace(job, **sb._prepare(job))
        except Exception as e:  # never fail a child because a mechanism is missing
            sb.notes.append(f"sandbox: {type(e).__name__}: {e} (the child runs unsealed)")
            sb.plan, sb.cpus = {}, []  # no CPU set of its own either
            return sb, job

    def _prepare(self, job: Any) -> dict:
        if off("all"):
            self.notes.append("sandbox: off (HEADROOM_VERIFY_SEAL_OFF)")
            return {}
        changes: dict = {}
        env = dict(job.env)
        self.dir = tempfile.mkdtemp(prefix=f"{self.role}-", dir=_run_root())
        cuda_plain = str(job.device).startswith("cuda") and os.environ.get(CUDA_UID_ENV) != "1"
        self._choose_uid(job, cuda_plain)
        changes.update(self._private_copies(job))
        private = self._private_dirs(env)
        ns = not off("ns") and os.geteuid() == 0
        binds = self._shared_build_dirs(env, ns, private)
        self._own_files()
        if self.role == "build":
            self.cpus, self.quota_cpus = sorted(os.sched_getaffinity(0)), None
        else:
            self.cpus, self.quota_cpus = cpu_sets.for_role(self.role, job.threads)
            if not job.threads:  # torch's threads follow the CPUs it got, alike in both children
                changes["threads"] = len(self.cpus)
        self.cgroup = Cgroup(self.name, self.cpus, self.quota_cpus)
        self.notes.extend(self.cgroup.notes)
        untrusted = self.role == "candidate"
        views = self._interpreter_views(ns)  # before the plan: it may keep the harness's uid
        self.plan = {
            "uid": self.uid,
            "procs": self.cgroup.procs_files(),
            "cpus": self.cpus,
            "ns": ns,
            "net": ns and not cuda_plain,
            "fds": not off("fds"),
            "private": private,
            "binds": binds,
            "views": views,
            "seccomp": untrusted and not off("seccomp"),
            "tmpfs": tmpfs_dirs(cuda_plain) if untrusted and ns and not off("tmpfs") else [],
        }
        if self.plan["tmpfs"] and cuda_plain:
            self.notes.append(
                "tmpfs: on a GPU the candidate shares the harness's /dev/shm (with a private one the harness "
                "could not map the candidate's CUDA IPC outputs: docs/verify.md)"
            )
        if not self.plan["ns"]:
            self.notes.append("namespaces: not root: the child shares the harness's mount and network namespaces")
        env[SEAL_ENV] = json.dumps(self.plan)
        changes["env"] = env
        return changes

    def _choose_uid(self, job: Any, cuda_plain: bool) -> None:
        """An unprivileged uid for a candidate or build child, where the harness can drop to one."""
        if self.role == "reference":
            return
        if cuda_plain:
            self.notes.append(
                f"uid: on a GPU the candidate keeps the harness's uid and network namespace "
                f"({CUDA_UID_ENV}=1 drops them; the harness then cannot map its CUDA IPC outputs on the H200)"
            )
        elif can_drop_uid():
            self.uid = candidate_uid(job)
        else:
            self.notes.append(
                "uid: the harness is not root: the candidate runs with the harness's uid "
                "(it can reach the reference and the harness through /proc and signals)"
            )

    def _private_copies(self, job: Any) -> dict:
        """The problem (and candidate) file the child imports: a private, read-only copy where needed."""
        changes: dict = {}
        if off("copy"):
            return changes
        for key in ("problem", "candidate"):
            src = getattr(job, key)
            # the reference always imports a private copy; a candidate its own files where every
            # uid can read them (its sibling modules keep working), else a copy it can read
            if src and (self.role == "reference" or (self.uid is not None and not _world_readable(src))):
                dst_dir = os.path.join(self.dir, key)  # type: ignore[arg-type]
                os.mkdir(dst_dir)
                dst = os.path.join(dst_dir, os.path.basename(src))
                shutil.copyfile(src, dst)
                os.chmod(dst, 0o444)
                changes[key] = dst
        return changes

    def _private_dirs(self, env: dict) -> dict:
        """HOME, TMPDIR and the compilers' caches of its own (``env`` is updated in place)."""
        d = self.dir
        assert d is not None
        for sub in ("home", "tmp", "inductor", "triton"):
            os.mkdir(os.path.join(d, sub))
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(d, "inductor"))
        env.setdefault("TRITON_CACHE_DIR", os.path.join(d, "triton"))
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        private = {"HOME": os.path.join(d, "home"), "TMPDIR": os.path.join(d, "tmp")}
        if self.uid is not None:
            private.update(USER=f"headroom{self.uid}", LOGNAME=f"headroom{self.uid}")
        return private

    def _shared_build_dirs(self, env: dict, ns: bool, private: dict) -> list:
        """A run's shared build directories, bind-mounted into the child (mode 1777); without a mount
        namespace to reach them the child keeps the harness's uid."""
        binds: list = []
        if self.uid is None:
            return binds
        for key in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR"):  # a build directory shared by a run's builds
            d = env.get(key)
            if d and not d.startswith(str(self.dir) + os.sep):
                if not ns:
                    self.notes.append(
                        f"uid: {key} is a shared build directory and there is no mount "
                        f"namespace to reach it through: the child keeps the harness's uid"
                    )
                    self.uid = None
                    break
                os.makedirs(d, exist_ok=True)
                os.chmod(d, 0o1777)  # like /tmp: each candidate's uid owns what it creates there
                dst = os.path.join(str(self.dir), "bind", key)
                os.makedirs(dst)
                binds.append([d, dst, key])  # its parents may be closed to the uid: bind-mounted in the child
        return binds

    def _own_files(self) -> None:
        """The child's directory: its uid's, closed to everyone else."""
        d = str(self.dir)
        if self.uid is not None:
            for root, dirs, files in os.walk(d):
                for n in dirs + files:
                    os.chown(os.path.join(root, n), self.uid, self.uid)
            os.chown(d, self.uid, self.uid)
        os.chmod(d, 0o700)

    def _interpreter_views(self, ns: bool) -> list:
        """Root-only directories on the interpreter's paths, opened to the uid in its mount namespace."""
        views: list = []
        if self.uid is not None and not ns and _closed_ancestors(_interpreter_paths()):
            self.notes.append(
                "uid: the interpreter is in a directory closed to other uids and there is no mount "
                "namespace to open it in: the child keeps the harness's uid"
            )
            self.uid = None
        if self.uid is not None and ns:
            for i, (closed, entries) in enumerate(sorted(_closed_ancestors(_interpreter_paths()).items())):
                v = os.path.join(str(self.dir), "view", str(i))
                os.makedirs(v)
                views.append([closed, entries, v])
        return views

    # after start

    def started(self, pid: int) -> None:
        """Right after the child starts: put it in its cgroup from outside too (idempotent)."""
        if self.cgroup is not None and self.cgroup.available:
            self.cgroup.add(pid)

    def verify(self, pid: int) -> None:
        """What the kernel says the child got (recorded; a missing piece is a note, not an error)."""
        v: dict = {}
        try:
            for ln in _read(f"/proc/{pid}/status").splitlines():
                if ln.startswith("Uid:"):
                    v["uid"] = int(ln.split()[1])
                elif ln.startswith("Cpus_allowed_list:"):
                    v["cpus"] = ln.split(":", 1)[1].strip()
                elif ln.startswith("NoNewPrivs:"):
                    v["no_new_privs"] = ln.split()[1] == "1"
        except OSError:
            pass
        for ns in ("mnt", "net"):
            try:
                v[f"own_{ns}_namespace"] = os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
            except OSError:
                pass
        if self.cgroup is not None and self.cgroup.available:
            v["in_cgroup"] = self.cgroup.contains(pid)
            if not v["in_cgroup"]:  # freezing by a cgroup it is not in would freeze nothing
                self.notes.append("cgroup: the child is not in its cgroup: freezing by SIGSTOP of the process tree")
                self.cgroup.remove()
                self.cgroup = None
        v["seccomp"] = syscalls.filter_mode(pid)
        if self.plan.get("seccomp") and v["seccomp"] != 2:
            self.notes.append("seccomp: no filter on the candidate's process: timers it arms fire while it is frozen")
        if self.uid is not None and v.get("uid") != self.uid:
            self.notes.append(f"uid: the child runs as uid {v.get('uid')}, not {self.uid}")
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            v["open_fds"] = len(fds)
        except OSError:
            pass
        self.verified = v

    # freezing, containment, accounting

    def freeze(self) -> bool:
        """Freeze by cgroup (False: no freezer). If the kernel has not confirmed it in time (a loaded
        machine), every member is also stopped: the cgroup stays frozen either way, and ``thaw``
        undoes both."""
        if self.cgroup is None or not self.cgroup.can_freeze:
            return False
        confirmed = self.cgroup.freeze()
        self.frozen_by_cgroup = self.cgroup.frozen
        if self.frozen_by_cgroup and not confirmed:
            self.notes.append("cgroup: a freeze was not confirmed within 2 s; its members were also stopped")
            for p in self.cgroup.pids():
                try:
                    os.kill(p, signal.SIGSTOP)
                except OSError:
                    pass
        return self.frozen_by_cgroup

    def thaw(self) -> None:
        if self.cgroup is not None and self.cgroup.frozen:
            self.cgroup.thaw()
            # a SIGSTOP from someone else (a stopper the cgroup froze mid-cycle) would leave the child
            # stopped while the harness waits for its reply
            for p in self.cgroup.pids():
                try:
                    os.kill(p, signal.SIGCONT)
                except OSError:
                    pass
        self.frozen_by_cgroup = False

    def can_set_cpus(self) -> bool:
        return self.cgroup is not None and self.cgroup.available and self.cgroup.can_set_cpus()

    def set_cpus(self, cpus: list[int]) -> bool:
        """Move the child (every process and thread in its cgroup) to ``cpus``; False where it cannot."""
        return self.cgroup is not None and self.cgroup.set_cpus(cpus)

    def members(self) -> list[int]:
        return self.cgroup.pids() if self.cgroup is not None and self.cgroup.available else []

    def kill(self) -> list[int]:
        return self.cgroup.kill() if self.cgroup is not None and self.cgroup.available else []

    def cpu_ns(self) -> int | None:
        return self.cgroup.cpu_ns() if self.cgroup is not None else None

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        if self.uid is not None:  # what its uid left in the shared temporary directories (after every process died)
            keep = {os.path.realpath(src) for src, _dst, _key in self.plan.get("binds", [])}  # a shared build directory
            left = sweep_uid(self.uid, exclude=keep)
            if left:
                self.notes.append(f"files: removed {left} file(s) the candidate left in {', '.join(SWEPT_DIRS)}")

    def describe(self) -> dict:
        return {
            "uid": self.uid,
            "cpus": self.cpus,
            "cpu_quota": self.quota_cpus,
            "cgroup": ("v2" if self.cgroup and self.cgroup.v2 else "")
            + ((" v1:" + ",".join(sorted(self.cgroup.v1))) if self.cgroup and self.cgroup.v1 else ""),
            "kernel": self.verified,
            "notes": list(dict.fromkeys(self.notes)),
            "memory_peak_bytes": self.cgroup.memory_peak() if self.cgroup is not None else None,
        }


SWEPT_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
TMPFS_DIRS = ("/var/tmp", "/dev/shm")  # not /tmp: the harness's private directories and the files are there


def tmpfs_dirs(cuda_plain: bool) -> list[str]:
    """The directories a candidate gets a private tmpfs over. On a GPU /dev/shm stays the harness's: since a
    private one was added, every GPU verify ended `error` with `mapping of buffer object failed`."""
    return [d for d in TMPFS_DIRS if not (cuda_plain and d == "/dev/shm")]


def sweep_uid(uid: int, roots: tuple[str, ...] = SWEPT_DIRS, exclude: set[str] | frozenset = frozenset()) -> int:
    """Remove every entry owned by ``uid`` under ``roots``; returns how many were removed. A directory is
    entered only where ``uid`` could have written: its own, or one every uid may write (/tmp's mode);
    never one of ``exclude`` (the run's build directories, which its later children load from)."""
    removed = 0
    stack = [r for r in roots if os.path.isdir(r)]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if exclude and os.path.realpath(e.path) in exclude:
                continue
            if st.st_uid == uid:
                removed += 1
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    try:
                        os.unlink(e.path)
                    except OSError:
                        pass
            elif e.is_dir(follow_symlinks=False) and st.st_mode & 0o002:
                stack.append(e.path)
    return removed


def _interpreter_paths() -> list[str]:
    """Directories the child's interpreter reads after the uid drop (lazy imports, sys.executable)."""
    import sys

    out = {os.path.realpath(sys.executable), os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
    out.update(os.path.realpath(p) for p in sys.path if p and os.path.isdir(p))
    return sorted(out)


def _closed_ancestors(paths: list[str]) -> dict[str, list[str]]:
    """{a directory others cannot traverse: [the entries below it on those paths]} (the first such level)."""
    import stat

    out: dict[str, list[str]] = {}
    for p in paths:
        parts = p.strip("/").split("/")
        for i in range(1, len(parts)):
            a = "/" + "/".join(parts[:i])
            try:
                closed = not (os.stat(a).st_mode & stat.S_IXOTH)
            except OSError:
                break
            if closed:
                if parts[i] not in out.setdefault(a, []):
                    out[a].append(parts[i])
                break
    return out
