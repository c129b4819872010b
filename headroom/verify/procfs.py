"""What /proc says about processes: children, descendants, scheduler statistics; stopping and killing trees.

Everything here reads the kernel's own accounting (``/proc/<pid>/task/*/children``,
``schedstat``, ``stat``), never what a process says about itself.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def children_of(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out.extend(int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except (OSError, ValueError):
            continue
    return out


def descendants(pid: int) -> list[int]:
    seen: list[int] = []
    todo = [pid]
    while todo:
        for c in children_of(todo.pop()):
            if c not in seen:
                seen.append(c)
                todo.append(c)
    return seen


def sched_ns(pid: int) -> tuple[int, int]:
    """(CPU time, run-queue wait) in ns, summed over the process's threads (``schedstat``)."""
    cpu = wait = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0
    for tid in tasks:
        try:
            f = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
            cpu += int(f[0])
            wait += int(f[1])
        except (OSError, ValueError, IndexError):
            continue
    return cpu, wait


def thread_sched_ns() -> tuple[int, int]:
    """(CPU time, run-queue wait) in ns of the calling thread (the harness's own wait for a CPU)."""
    import threading

    try:
        f = Path(f"/proc/self/task/{threading.get_native_id()}/schedstat").read_text().split()
        return int(f[0]), int(f[1])
    except (OSError, ValueError, IndexError):
        return 0, 0


def send_signal(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_tree(root: int) -> list[int]:
    """SIGSTOP ``root`` and every descendant, repeating until no new process appears."""
    stopped: list[int] = []
    frontier = [root]
    for _ in range(64):
        new = [p for p in frontier if p not in stopped]
        if not new:
            break
        send_signal(new, signal.SIGSTOP)
        stopped.extend(new)
        frontier = [d for p in stopped for d in children_of(p)]
    return stopped


def reap(pids: list[int]) -> None:
    for p in pids:
        try:
            os.waitpid(p, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass


def own_children() -> set[int]:
    return set(children_of(os.getpid()))


def signal_name(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def started_after(pid: int, t_monotonic: float) -> bool:
    """Whether ``pid`` started after ``t_monotonic`` (boot-relative start time from /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        start_s = start_ticks / os.sysconf("SC_CLK_TCK")
        return start_s >= time.clock_gettime(time.CLOCK_BOOTTIME) - (time.monotonic() - t_monotonic) - 0.05
    except (OSError, ValueError, IndexError):
        return False
