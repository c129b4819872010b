"""Sealing a verify child: its own cgroup, namespaces, uid, descriptors and private files.

The harness builds a ``Sandbox`` for each child before starting it (``process.Child``); the plan
travels to the child in its job's environment (``SEAL_ENV``) and the child applies it in
``child._isolate`` — before any problem or candidate code runs:

* **cgroup** (``Cgroup``): one per child — cgroup v2 (``cgroup.freeze``, ``cgroup.kill``,
  ``cpu.stat``) where a cgroup2 hierarchy is mounted and writable, and the v1 ``freezer``, ``cpu``,
  ``cpuacct``, ``cpuset`` and ``pids`` controllers where mounted. Membership is inherited by every
  process the child starts, whatever its parent (``clone(CLONE_PARENT)``, ``setsid``, a double
  fork): the harness freezes, counts, accounts and kills by cgroup, so no relative escapes.
  Both timed children get the same CPU set and CFS quota (``--threads`` CPUs).
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

import ctypes
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

SEAL_ENV = "HEADROOM_SEAL"
# On a GPU the uid drop and the network namespace are opt-in until CUDA IPC across uids and
# network namespaces is verified on the H200: a failure there would make every candidate an error.
CUDA_UID_ENV = "HEADROOM_VERIFY_SEAL_CUDA_UID"
OFF_ENV = "HEADROOM_VERIFY_SEAL_OFF"  # comma list of mechanisms to leave off (tests of degradation): all,cgroup,v2,uid,ns,fds,copy
CGROUP_ROOT = "/sys/fs/cgroup"
V1_CONTROLLERS = ("freezer", "cpu", "cpuacct", "cpuset", "pids")
UID_BASE = 1_500_000_000  # unprivileged uids with no passwd entry, one per candidate
UID_SPAN = 1_000_000
PIDS_MAX = 4096  # a fork bomb stops here instead of at the machine's limit
CFS_PERIOD_US = 100_000
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38

_KEEP_FDS: set[int] = set()  # in the child: descriptors that stay open (the command pipe)
_LOCK = threading.Lock()
_RUN_ROOT: str | None = None


def off(what: str) -> bool:
    flags = {s.strip() for s in os.environ.get(OFF_ENV, "").split(",") if s.strip()}
    return "all" in flags or what in flags


def keep_fd(fd: int) -> None:
    """Called in the child before ``child.main``: this descriptor survives ``lock``."""
    _KEEP_FDS.add(fd)


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


# --- cgroups (harness side) -------------------------------------------------------------------


class Cgroup:
    """One child's cgroup: v2 (freeze, kill, accounting) and/or v1 controllers (limits, fallback)."""

    def __init__(self, name: str, cpus: list[int] | None, quota_cpus: int | None):
        self.notes: list[str] = []
        self.v2: str | None = None
        self.v1: dict[str, str] = {}
        self.frozen = False
        self.cpus = cpus
        self.quota_cpus = quota_cpus
        if off("cgroup"):
            self.notes.append("cgroup: off (HEADROOM_VERIFY_SEAL_OFF)")
            return
        unified = os.path.join(CGROUP_ROOT, "unified")
        v2_root = unified if os.path.isfile(os.path.join(unified, "cgroup.procs")) else (
            CGROUP_ROOT if os.path.isfile(os.path.join(CGROUP_ROOT, "cgroup.controllers")) else None)
        if v2_root and not off("v2"):
            path = os.path.join(v2_root, name)
            try:
                os.mkdir(path)
                if os.path.isfile(os.path.join(path, "cgroup.freeze")):
                    self.v2 = path
                else:
                    os.rmdir(path)
                    self.notes.append("cgroup v2: no cgroup.freeze (kernel older than 5.2)")
            except OSError as e:
                self.notes.append(f"cgroup v2: {e.strerror} creating {path}")
        seen: set[str] = set()
        for ctrl in V1_CONTROLLERS:
            base = os.path.realpath(os.path.join(CGROUP_ROOT, ctrl))  # cpu and cpuacct are often one hierarchy
            if not os.path.isfile(os.path.join(base, "cgroup.procs")) or base == v2_root or base in seen:
                continue
            seen.add(base)
            path = os.path.join(base, name)
            try:
                os.mkdir(path)
                if ctrl == "cpuset":
                    _write(os.path.join(path, "cpuset.mems"), _read(os.path.join(base, "cpuset.mems")).strip())
                    _write(os.path.join(path, "cpuset.cpus"), ",".join(map(str, cpus)) if cpus else
                           _read(os.path.join(base, "cpuset.cpus")).strip())
                elif ctrl == "cpu" and quota_cpus:
                    _write(os.path.join(path, "cpu.cfs_period_us"), str(CFS_PERIOD_US))
                    _write(os.path.join(path, "cpu.cfs_quota_us"), str(CFS_PERIOD_US * quota_cpus))
                elif ctrl == "pids":
                    _write(os.path.join(path, "pids.max"), str(PIDS_MAX))
                self.v1[ctrl] = path
            except OSError as e:
                self.notes.append(f"cgroup v1 {ctrl}: {e.strerror}")
                try:
                    os.rmdir(path)
                except OSError:
                    pass
        if self.v2 and "cpuset" not in self.v1:
            self._v2_limits(v2_root)  # type: ignore[arg-type]
        if not self.v2 and not self.v1:
            self.notes.append("cgroup: no writable hierarchy: freezing and containment by signals and /proc only")
        elif not self.can_freeze:
            self.notes.append("cgroup: no freezer: freezing by SIGSTOP of the process tree")

    def _v2_limits(self, root: str) -> None:
        """CPU set, quota and task cap through cgroup v2 controllers (a v2-only machine)."""
        try:
            have = _read(os.path.join(root, "cgroup.controllers")).split()
        except OSError:
            have = []
        wanted = {"cpuset": ("cpuset.cpus", ",".join(map(str, self.cpus or []))),
                  "cpu": ("cpu.max", f"{CFS_PERIOD_US * self.quota_cpus} {CFS_PERIOD_US}" if self.quota_cpus else ""),
                  "pids": ("pids.max", str(PIDS_MAX))}
        for ctrl, (knob, value) in wanted.items():
            if ctrl not in have or not value:
                if ctrl in ("cpuset", "cpu") and value:
                    self.notes.append(f"cgroup v2: no {ctrl} controller: no {knob} for the child")
                continue
            try:
                _write(os.path.join(root, "cgroup.subtree_control"), f"+{ctrl}")
                _write(os.path.join(self.v2, knob), value)  # type: ignore[arg-type]
            except OSError as e:
                self.notes.append(f"cgroup v2 {ctrl}: {e.strerror}")

    @property
    def available(self) -> bool:
        return bool(self.v2 or self.v1)

    @property
    def can_freeze(self) -> bool:
        return bool(self.v2 or "freezer" in self.v1)

    def procs_files(self) -> list[str]:
        return [os.path.join(p, "cgroup.procs") for p in ([self.v2] if self.v2 else []) + list(self.v1.values())]

    def add(self, pid: int) -> None:
        for f in self.procs_files():
            try:
                _write(f, str(pid))
            except OSError:
                pass

    def contains(self, pid: int) -> bool:
        """Whether ``pid`` is in every hierarchy of this cgroup (read from /proc/<pid>/cgroup)."""
        try:
            lines = _read(f"/proc/{pid}/cgroup").splitlines()
        except OSError:
            return False
        paths = set()
        for ln in lines:
            parts = ln.split(":", 2)
            if len(parts) == 3:
                paths.add(parts[2])
        want = {"/" + os.path.basename(p) for p in ([self.v2] if self.v2 else []) + list(self.v1.values())}
        return want <= paths

    def pids(self) -> list[int]:
        """Every process in the cgroup (the kernel's list: descendants, siblings and orphans alike)."""
        out: set[int] = set()
        for f in self.procs_files():
            try:
                out.update(int(x) for x in _read(f).split())
            except (OSError, ValueError):
                continue
        return sorted(out)

    def freeze(self) -> bool:
        """Freeze every process in the cgroup and wait until the kernel says so (False: not frozen)."""
        if self.v2:
            try:
                _write(os.path.join(self.v2, "cgroup.freeze"), "1")
                self.frozen = True
                return self._wait(lambda: "frozen 1" in _read(os.path.join(self.v2, "cgroup.events")))
            except OSError:
                return False
        if "freezer" in self.v1:
            try:
                _write(os.path.join(self.v1["freezer"], "freezer.state"), "FROZEN")
                self.frozen = True
                return self._wait(lambda: _read(os.path.join(self.v1["freezer"], "freezer.state")).strip() == "FROZEN")
            except OSError:
                return False
        return False

    @staticmethod
    def _wait(done: Any, limit: float = 2.0) -> bool:
        t_end = time.monotonic() + limit
        while True:
            if done():
                return True
            if time.monotonic() > t_end:
                return False
            time.sleep(0.0002)

    def thaw(self) -> None:
        if not self.frozen:
            return
        try:
            if self.v2:
                _write(os.path.join(self.v2, "cgroup.freeze"), "0")
            elif "freezer" in self.v1:
                _write(os.path.join(self.v1["freezer"], "freezer.state"), "THAWED")
        except OSError:
            pass
        self.frozen = False

    def kill(self) -> list[int]:
        """SIGKILL everything in the cgroup (frozen first: nothing forks in between); the pids killed."""
        victims = self.pids()
        if self.v2:
            try:
                _write(os.path.join(self.v2, "cgroup.kill"), "1")  # atomic: frozen or not, nothing forks past it
                self.thaw()
                return victims
            except OSError:  # kernel older than 5.14
                pass
        self.freeze()
        for p in self.pids():
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        self.thaw()  # frozen tasks die only once thawed (v1)
        return victims

    def cpu_ns(self) -> int | None:
        """CPU time used by every process that was ever in the cgroup (ns)."""
        if self.v2:
            try:
                for ln in _read(os.path.join(self.v2, "cpu.stat")).splitlines():
                    if ln.startswith("usage_usec"):
                        return int(ln.split()[1]) * 1000
            except (OSError, ValueError, IndexError):
                pass
        if "cpuacct" in self.v1:
            try:
                return int(_read(os.path.join(self.v1["cpuacct"], "cpuacct.usage")))
            except (OSError, ValueError):
                pass
        return None

    def remove(self) -> None:
        for path in ([self.v2] if self.v2 else []) + list(self.v1.values()):
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # still has (dying) members
                    time.sleep(0.02)
        self.v2, self.v1 = None, {}


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


def fair_cpus(threads: int | None) -> tuple[list[int], int | None]:
    """The CPU set and CFS quota (in CPUs) every timed child gets: ``threads`` CPUs, or all."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads and 0 < threads < len(allowed):
        return allowed[:threads], threads
    return allowed, (threads if threads else None)


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
            sb.plan = {}
            return sb, job

    def _prepare(self, job: Any) -> dict:
        if off("all"):
            self.notes.append("sandbox: off (HEADROOM_VERIFY_SEAL_OFF)")
            return {}
        changes: dict = {}
        env = dict(job.env)
        self.dir = tempfile.mkdtemp(prefix=f"{self.role}-", dir=_run_root())
        cuda_plain = str(job.device).startswith("cuda") and os.environ.get(CUDA_UID_ENV) != "1"
        if self.role != "reference":
            if cuda_plain:
                self.notes.append(f"uid: on a GPU the candidate keeps the harness's uid and network namespace "
                                  f"({CUDA_UID_ENV}=1 drops them; the harness then cannot map its CUDA IPC outputs on the H200)")
            elif can_drop_uid():
                self.uid = candidate_uid(job)
            else:
                self.notes.append("uid: the harness is not root: the candidate runs with the harness's uid "
                                  "(it can reach the reference and the harness through /proc and signals)")
        if not off("copy"):
            for key in ("problem", "candidate"):
                src = getattr(job, key)
                # the reference always imports a private copy; a candidate its own files where every
                # uid can read them (its sibling modules keep working), else a copy it can read
                if src and (self.role == "reference" or (self.uid is not None and not _world_readable(src))):
                    dst_dir = os.path.join(self.dir, key)
                    os.mkdir(dst_dir)
                    dst = os.path.join(dst_dir, os.path.basename(src))
                    shutil.copyfile(src, dst)
                    os.chmod(dst, 0o444)
                    changes[key] = dst
        for sub in ("home", "tmp", "inductor", "triton"):
            os.mkdir(os.path.join(self.dir, sub))
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(self.dir, "inductor"))
        env.setdefault("TRITON_CACHE_DIR", os.path.join(self.dir, "triton"))
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        private = {"HOME": os.path.join(self.dir, "home"), "TMPDIR": os.path.join(self.dir, "tmp")}
        binds: list = []
        ns = not off("ns") and os.geteuid() == 0
        if self.uid is not None:
            private.update(USER=f"headroom{self.uid}", LOGNAME=f"headroom{self.uid}")
            for key in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR"):  # a build directory shared by a run's builds
                d = env.get(key)
                if d and not d.startswith(self.dir + os.sep):
                    if not ns:
                        self.notes.append(f"uid: {key} is a shared build directory and there is no mount "
                                          f"namespace to reach it through: the child keeps the harness's uid")
                        self.uid = None
                        break
                    os.makedirs(d, exist_ok=True)
                    os.chmod(d, 0o1777)  # like /tmp: each candidate's uid owns what it creates there
                    dst = os.path.join(self.dir, "bind", key)
                    os.makedirs(dst)
                    binds.append([d, dst, key])  # its parents may be closed to the uid: bind-mounted in the child
        if self.uid is not None:
            for root, dirs, files in os.walk(self.dir):
                for n in dirs + files:
                    os.chown(os.path.join(root, n), self.uid, self.uid)
            os.chown(self.dir, self.uid, self.uid)
        os.chmod(self.dir, 0o700)
        if self.role == "build":
            self.cpus, self.quota_cpus = sorted(os.sched_getaffinity(0)), None
        else:
            self.cpus, self.quota_cpus = fair_cpus(job.threads)
        self.cgroup = Cgroup(self.name, self.cpus, self.quota_cpus)
        self.notes.extend(self.cgroup.notes)
        views = []
        if self.uid is not None and not ns and _closed_ancestors(_interpreter_paths()):
            self.notes.append("uid: the interpreter is in a directory closed to other uids and there is no mount "
                              "namespace to open it in: the child keeps the harness's uid")
            self.uid = None
        if self.uid is not None and ns:
            for i, (closed, entries) in enumerate(sorted(_closed_ancestors(_interpreter_paths()).items())):
                v = os.path.join(self.dir, "view", str(i))
                os.makedirs(v)
                views.append([closed, entries, v])
        self.plan = {"uid": self.uid, "procs": self.cgroup.procs_files(), "cpus": self.cpus, "ns": ns,
                     "net": ns and not cuda_plain, "fds": not off("fds"), "private": private, "binds": binds,
                     "views": views}
        if not self.plan["ns"]:
            self.notes.append("namespaces: not root: the child shares the harness's mount and network namespaces")
        env[SEAL_ENV] = json.dumps(self.plan)
        changes["env"] = env
        return changes

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
        if self.uid is not None and v.get("uid") != self.uid:
            self.notes.append(f"uid: the child runs as uid {v.get('uid')}, not {self.uid}")
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            v["open_fds"] = len(fds)
        except OSError:
            pass
        self.verified = v

    def grant(self, path: str) -> None:
        """Give the child's uid a file the harness made for it (the CPU input ring) and its directory."""
        if self.uid is None or not path:
            return
        try:
            os.chown(os.path.dirname(path), self.uid, self.uid)
            os.chown(path, self.uid, self.uid)
        except OSError as e:
            self.notes.append(f"ring: cannot give it to uid {self.uid}: {e.strerror}")

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

    def describe(self) -> dict:
        return {"uid": self.uid, "cpus": self.cpus, "cpu_quota": self.quota_cpus,
                "cgroup": ("v2" if self.cgroup and self.cgroup.v2 else "") + (
                    (" v1:" + ",".join(sorted(self.cgroup.v1))) if self.cgroup and self.cgroup.v1 else ""),
                "kernel": self.verified, "notes": list(dict.fromkeys(self.notes))}


# --- fairness: CPU per forward, from the cgroups' own accounting ------------------------------

CPU_SLACK = 1.25  # parallelism above the allowed CPUs by more than this factor (plus 0.1) is flagged


def _cpu_use(child: Any) -> dict | None:
    if not getattr(child, "run_forwards", 0) or not child.run_wall_ns:
        return None
    return {"cpu_ms_per_forward": child.run_cpu_ns / child.run_forwards / 1e6,
            "parallelism": child.run_cpu_ns / child.run_wall_ns, "forwards": child.run_forwards}


def report(cand: Any, ref: Any, threads: int | None) -> dict:
    """``info["sandbox"]``: what each child got, and the CPU it used while timed."""
    out: dict = {"candidate": cand.sandbox.describe()}
    if ref is not None:
        out["reference"] = ref.sandbox.describe()
    c, r = _cpu_use(cand), _cpu_use(ref) if ref is not None else None
    if c is not None:
        allowed = threads or len(cand.sandbox.cpus) or (os.cpu_count() or 1)
        out["cpu"] = {"candidate": c, "reference": r, "allowed_cpus": allowed,
                      "method": "cgroup CPU time (every process of the child) over the harness's wall time of "
                                "its timed phases"}
    return out


def cpu_flags(info: dict | None) -> list:
    """A review flag when the candidate used more CPUs in parallel than both children were allowed."""
    from headroom.verify.compare import Check

    cpu = (info or {}).get("cpu")
    if not cpu or not cpu.get("candidate"):
        return []
    par, allowed = cpu["candidate"]["parallelism"], cpu["allowed_cpus"]
    if par > allowed * CPU_SLACK + 0.1:
        ref = cpu.get("reference") or {}
        return [Check("cpu", False, f"the candidate used {par:.2f} CPUs in parallel while timed ({allowed} "
                                    f"allowed; the reference {ref.get('parallelism', float('nan')):.2f}): "
                                    f"its speedup is not the kernel's alone")]
    return []


# --- in the child -----------------------------------------------------------------------------


def _plan(job: Any) -> dict | None:
    raw = job.env.get(SEAL_ENV)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def enter(job: Any) -> None:
    """First thing in the child (still privileged): join the cgroup, own namespaces."""
    plan = _plan(job)
    if plan is None:
        return
    for f in plan.get("procs", []):
        try:
            _write(f, "0")  # "0": the writing process
        except OSError:
            pass
    plan["bound"] = True
    if plan.get("ns"):
        libc = _libc()
        if (plan.get("net") and libc.unshare(CLONE_NEWNS | CLONE_NEWNET) == 0) or libc.unshare(CLONE_NEWNS) == 0:
            libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None)  # nothing propagates back to the host
            for src, dst, key in plan.get("binds", []):
                if libc.mount(src.encode(), dst.encode(), None, MS_BIND, None) == 0:
                    job.env[key] = dst
                else:
                    plan["bound"] = False
            if plan.get("uid") is not None and plan.get("views"):
                _open_views(libc, plan["views"])
        else:  # no namespace: a build directory or the interpreter would be out of the uid's reach
            plan["bound"] = not plan.get("binds") and not plan.get("views")
    elif plan.get("binds") or plan.get("views"):
        plan["bound"] = False
    job.env[SEAL_ENV] = json.dumps(plan)


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


def _open_views(libc: Any, views: list) -> None:
    """In the child's own mount namespace, a traversable view of each closed directory on the
    interpreter's paths (a root-only /root holding pyenv): a tmpfs with just those entries bound in,
    bound over the directory. Nothing else of it becomes visible; the host is untouched."""
    for closed, entries, view in views:
        try:
            if libc.mount(b"tmpfs", view.encode(), b"tmpfs", 0, b"mode=0711") != 0:
                continue
            for e in entries:
                src = os.path.join(closed, e)
                dst = os.path.join(view, e)
                if os.path.isdir(src):
                    os.mkdir(dst)
                else:
                    open(dst, "w").close()
                libc.mount(src.encode(), dst.encode(), None, MS_BIND | MS_REC, None)
            libc.mount(view.encode(), closed.encode(), None, MS_BIND | MS_REC, None)
        except OSError:
            continue


def _fd_kind(fd: int) -> str:
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""
    if target.startswith(("pipe:", "socket:")):
        return "ipc"
    if target.startswith("anon_inode:") or target.startswith("/dev/"):
        return "device"  # eventfds, epolls, devices a library holds: they lead nowhere in the harness
    return "file"


def forget_helpers() -> None:
    """After the harness's descriptors are closed: multiprocessing's record of the harness's fork server
    and resource tracker goes too. Their descriptor numbers are free and the next files opened take them
    (CUDA's device files, opened before the candidate is imported); a candidate's multiprocessing would
    otherwise probe the resource tracker's number, find it is no pipe, and close it: CUDA's file, its
    context lost ("CUDA error: unknown error"). The fork server is forgotten (a candidate's own starts
    in its cgroup); the resource tracker becomes /dev/null, so code that registers a semaphore (inductor
    does) starts no process that would outlive the candidate's forward."""
    import sys

    fsmod, rtmod = sys.modules.get("multiprocessing.forkserver"), sys.modules.get("multiprocessing.resource_tracker")
    if fsmod is not None:
        fs = fsmod._forkserver
        fs._forkserver_address = fs._forkserver_alive_fd = fs._forkserver_pid = None
        if hasattr(fs, "_inherited_fds"):
            fs._inherited_fds = None
    if rtmod is not None:
        rtmod._resource_tracker._fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        rtmod._resource_tracker._pid = None


def lock(job: Any) -> None:
    """Last thing of the child's set-up, before the problem or the candidate is imported."""
    plan = _plan(job)
    job.env.pop(SEAL_ENV, None)
    if plan is None:
        return
    os.environ.update(plan.get("private", {}))
    tempfile.tempdir = None
    import sys

    sys.dont_write_bytecode = True
    if plan.get("fds"):
        keep = {0, 1, 2} | _KEEP_FDS
        try:
            fds = [int(x) for x in os.listdir("/proc/self/fd")]
        except OSError:
            fds = []
        for fd in fds:
            if fd not in keep and _fd_kind(fd) in ("ipc", "file"):
                try:
                    os.close(fd)
                except OSError:
                    pass
        forget_helpers()
    if plan.get("cpus"):
        try:
            os.sched_setaffinity(0, plan["cpus"])
        except OSError:
            pass
    uid = plan.get("uid") if plan.get("bound", True) else None  # a build directory out of reach: keep the uid
    libc = _libc()
    if uid is not None:
        parent = os.getppid()
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        except OSError:
            return  # the harness sees the uid it kept (Sandbox.verify) and records it
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binary gives root back
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc stays its own (memory measurement)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)  # cleared by the uid change
        if os.getppid() != parent:
            os._exit(1)

