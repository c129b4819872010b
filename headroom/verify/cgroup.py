"""One verify child's cgroup (harness side): freeze, count, account, limit and kill every process it
starts, by membership (``sandbox`` says what each mechanism defends)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

CGROUP_ROOT = "/sys/fs/cgroup"
V1_CONTROLLERS = ("freezer", "cpu", "cpuacct", "cpuset", "pids", "memory")
PIDS_MAX = 4096  # a fork bomb stops here instead of at the machine's limit
CFS_PERIOD_US = 100_000
# comma list of mechanisms to leave off (tests of degradation): all,cgroup,v2,uid,ns,fds,copy,seccomp,tmpfs
OFF_ENV = "HEADROOM_VERIFY_SEAL_OFF"


def off(what: str) -> bool:
    flags = {s.strip() for s in os.environ.get(OFF_ENV, "").split(",") if s.strip()}
    return "all" in flags or what in flags


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


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
        v2_root = (
            unified
            if os.path.isfile(os.path.join(unified, "cgroup.procs"))
            else (CGROUP_ROOT if os.path.isfile(os.path.join(CGROUP_ROOT, "cgroup.controllers")) else None)
        )
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
                    _write(
                        os.path.join(path, "cpuset.cpus"),
                        ",".join(map(str, cpus)) if cpus else _read(os.path.join(base, "cpuset.cpus")).strip(),
                    )
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
        wanted = {
            "cpuset": ("cpuset.cpus", ",".join(map(str, self.cpus or []))),
            "cpu": ("cpu.max", f"{CFS_PERIOD_US * self.quota_cpus} {CFS_PERIOD_US}" if self.quota_cpus else ""),
            "pids": ("pids.max", str(PIDS_MAX)),
            "memory": ("memory.max", "max"),
        }  # memory: its peak
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

    def _cpuset_file(self) -> str | None:
        if "cpuset" in self.v1:
            return os.path.join(self.v1["cpuset"], "cpuset.cpus")
        if self.v2 and os.path.isfile(os.path.join(self.v2, "cpuset.cpus")):
            return os.path.join(self.v2, "cpuset.cpus")
        return None

    def can_set_cpus(self) -> bool:
        return self._cpuset_file() is not None

    def set_cpus(self, cpus: list[int]) -> bool:
        """Move every task of the cgroup to ``cpus`` (the kernel rewrites each task's affinity)."""
        f = self._cpuset_file()
        if f is None:
            return False
        try:
            _write(f, ",".join(map(str, cpus)))
        except OSError as e:
            self.notes.append(f"cgroup cpuset: {e.strerror} moving the child to CPUs {cpus}")
            return False
        self.cpus = list(cpus)
        return True

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

    def memory_peak(self) -> int | None:
        """The most memory every process of the cgroup held at once, page cache and tmpfs pages included
        (bytes; v2 ``memory.peak``, v1 ``memory.max_usage_in_bytes``), None where not accounted."""
        files = ([os.path.join(self.v2, "memory.peak")] if self.v2 else []) + (
            [os.path.join(self.v1["memory"], "memory.max_usage_in_bytes")] if "memory" in self.v1 else []
        )
        for f in files:
            try:
                return int(_read(f).strip())
            except (OSError, ValueError):
                continue
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
