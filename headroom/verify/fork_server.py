"""The harness's fork server (multiprocessing's): is it still serving, replace it when it is not, and
which of its processes are no child of the harness (strays); the harness as a child subreaper."""

from __future__ import annotations

import ctypes
import os
import signal
import weakref
from typing import Any

from headroom.verify.procfs import children_of, reap, send_signal

PR_SET_CHILD_SUBREAPER = 36
_SUBREAPER = False
LIVE: weakref.WeakSet[Any] = weakref.WeakSet()  # every live ``process.Child``

# Fork servers that stopped serving (one connection closed before its request ends multiprocessing's
# server loop, not its process): kept off the stray lists, killed once they have no child left.
_RETIRED: dict[int, int | None] = {}  # pid -> the harness's end of its 'alive' pipe (closed when it is killed)
FORK_SERVER_LOST: list[str] = []  # why each fork server was replaced, in order (a candidate's run compares counts)
_SO_ACCEPTCON = 0x10000  # /proc/net/unix "Flags": the socket listens


def _listening(address: Any) -> bool | None:
    """Whether a Unix socket listens at ``address`` (None: /proc/net/unix unreadable). Reading the
    table, not connecting: a connection closed without a request is what stops the server."""
    path = address.decode() if isinstance(address, bytes) else str(address)
    if path.startswith("\0"):
        path = "@" + path[1:]
    try:
        with open("/proc/net/unix") as f:
            next(f, None)
            for line in f:
                parts = line.split()
                if len(parts) >= 8 and parts[7] == path:
                    if int(parts[3], 16) & _SO_ACCEPTCON:
                        return True
    except (OSError, ValueError):
        return None
    return False


def fork_server_ok() -> bool:
    """The harness's fork server, where one was started, is alive and listening."""
    from multiprocessing import forkserver

    fs: Any = forkserver._forkserver
    pid, address = getattr(fs, "_forkserver_pid", None), getattr(fs, "_forkserver_address", None)
    if not pid or not address:
        return True
    if not _running(pid):
        return False
    return _listening(address) is not False


def replace_fork_server(why: str) -> None:
    """Forget the fork server (kept alive while it is some live child's parent: its children die with
    it) and start another; the reason is recorded in ``FORK_SERVER_LOST``."""
    from multiprocessing import forkserver

    fs: Any = forkserver._forkserver
    with fs._lock:
        if fs._forkserver_pid:  # its 'alive' pipe stays open: closing it ends the server, and its children with it
            _RETIRED[fs._forkserver_pid] = fs._forkserver_alive_fd
        fs._forkserver_address = fs._forkserver_alive_fd = fs._forkserver_pid = None
    FORK_SERVER_LOST.append(why)
    _end_retired()
    forkserver.ensure_running()


def _end_retired() -> None:
    for pid, alive in list(_RETIRED.items()):
        if not children_of(pid):
            send_signal([pid], signal.SIGKILL)
            reap([pid])
            if alive is not None:
                try:
                    os.close(alive)
                except OSError:
                    pass
            del _RETIRED[pid]


def fork_server_strays() -> list[int]:
    """Children of the fork server (the current one and retired ones) that are no ``Child`` of the
    harness: processes someone else asked the server for (a candidate with the harness's uid can
    reach its socket). Never frozen with a child's cgroup, so always a containment failure."""
    from multiprocessing import forkserver

    ours = {c.pid for c in list(LIVE) if getattr(c, "pid", None)}
    servers = {getattr(forkserver._forkserver, "_forkserver_pid", None), *_RETIRED}
    return sorted(p for p in {p for s in servers if s for p in children_of(s)} - ours if _running(p))


def _running(pid: int) -> bool:
    """Not a zombie (a closed child the server has not reaped yet) and not gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _helpers() -> set[int]:
    """multiprocessing's own processes (the fork server, the resource tracker, retired fork servers)."""
    from multiprocessing import forkserver, resource_tracker

    pids = {
        getattr(forkserver._forkserver, "_forkserver_pid", None),
        getattr(resource_tracker._resource_tracker, "_pid", None),
        *_RETIRED,
    }
    return {p for p in pids if p}


def become_subreaper() -> bool:
    """Make this process the reaper of orphaned descendants (Linux); idempotent."""
    global _SUBREAPER
    if not _SUBREAPER:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _SUBREAPER = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):  # pragma: no cover - not Linux
            _SUBREAPER = False
    return _SUBREAPER
