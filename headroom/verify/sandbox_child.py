"""The child's half of the seal (``sandbox``): applied in ``child._isolate`` before any problem or
candidate code runs — its cgroup and namespaces while still privileged (``enter``), a private tmpfs
over /dev/shm and /var/tmp for a candidate, then its private files, closed descriptors, uid and
system-call filter (``lock``)."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import tempfile
from typing import Any

from headroom.verify import syscalls
from headroom.verify.cgroup import _write

SEAL_ENV = "HEADROOM_SEAL"
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
MS_NOSUID, MS_NODEV = 0x2, 0x4
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38

_KEEP_FDS: set[int] = set()  # in the child: descriptors that stay open (the command pipe)


def keep_fd(fd: int) -> None:
    """Called in the child before ``child.main``: this descriptor survives ``lock``."""
    _KEEP_FDS.add(fd)


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


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
            if plan.get("tmpfs"):
                private_tmpfs(libc, plan["tmpfs"])
        else:  # no namespace: a build directory or the interpreter would be out of the uid's reach
            plan["bound"] = not plan.get("binds") and not plan.get("views")
    elif plan.get("binds") or plan.get("views"):
        plan["bound"] = False
    job.env[SEAL_ENV] = json.dumps(plan)


TMPFS_SIZE = "4g"  # per directory; pages there are the candidate's memory (its cgroup's)


def private_tmpfs(libc: Any, dirs: list[str]) -> None:
    """In the child's own mount namespace (still privileged): a fresh tmpfs over each of ``dirs``
    (/var/tmp, and /dev/shm off a GPU: ``sandbox.tmpfs_dirs``).
    Whatever it writes there is seen by nothing else and goes with its namespace when its last process
    dies: no file there outlives the run, none is left for a later candidate or the reference."""
    for d in dirs:
        if os.path.isdir(d):
            libc.mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={TMPFS_SIZE}".encode())


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
    if plan.get("seccomp"):
        why = syscalls.install()  # the harness reads the result in /proc (Sandbox.verify)
        if why:
            print(f"headroom: {why}", file=sys.stderr)
