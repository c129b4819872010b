"""A seccomp filter for the candidate's process: nothing it starts can act while it is frozen.

A frozen cgroup runs no task, but the kernel still runs work that a task left armed: a timer
(``timer_create``, ``timerfd_create``, ``setitimer``/``alarm``) fires its interrupt on the CPU it was
armed on, whatever runs there — the reference's timed phase, whose time the interrupts steal without
any run-queue wait to show it; asynchronous I/O (``io_uring``, ``io_setup``) completes in kernel
workers. A new user namespace would give the candidate's uid privileges over what it then creates.
So a candidate's process (and everything it starts: a filter is inherited and cannot be removed)
gets ``EPERM`` for those system calls, and ``ENOSYS`` for ``clone3`` (whose flags a filter cannot
read: the C library falls back to ``clone``, whose namespace flags it can). Sleeping calls
(``nanosleep``, futex and poll timeouts) are not filtered: freezing interrupts them and cancels
their timers.

Written as a classic BPF program installed with ``seccomp(2)`` (``SECCOMP_FILTER_FLAG_TSYNC``: every
thread) through ctypes: the maintained Python bindings need libseccomp's shared library or a
compiler on the machine (the GPU image has neither for certain), and the program is 40
instructions. x86-64 only (other architectures: no filter, a note); a system call of another ABI
(x32, i386 through ``int 0x80``) is refused whole.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_BIT = 0x40000000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38

# x86-64 numbers: what keeps running, or gains privileges, while the candidate is frozen
DENIED = {
    "alarm": 37,
    "setitimer": 38,
    "io_setup": 206,
    "io_submit": 209,
    "timer_create": 222,
    "timer_settime": 223,
    "unshare": 272,
    "timerfd_create": 283,
    "timerfd_settime": 286,
    "perf_event_open": 298,
    "setns": 308,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
}
CLONE, CLONE3 = 56, 435
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 317, 1, 1
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


def program() -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions."""
    deny = RET_ERRNO | EPERM
    prog = [
        (_LD_W_ABS, 0, 0, 4),  # arch
        (_JEQ, 1, 0, AUDIT_ARCH_X86_64),
        (_RET, 0, 0, deny),
        (_LD_W_ABS, 0, 0, 0),  # nr
        (_JGE, 0, 1, X32_BIT),
        (_RET, 0, 0, deny),
    ]
    for nr in sorted(DENIED.values()):
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, deny)]
    prog += [
        (_JEQ, 0, 1, CLONE3),
        (_RET, 0, 0, RET_ERRNO | ENOSYS),
        (_JEQ, 0, 3, CLONE),
        (_LD_W_ABS, 0, 0, 16),  # clone's flags (the low word of its first argument)
        (_JSET, 0, 1, NAMESPACE_FLAGS),
        (_RET, 0, 0, deny),
        (_RET, 0, 0, RET_ALLOW),
    ]
    return prog


def supported() -> bool:
    return platform.machine() in ("x86_64", "AMD64") and os.name == "posix"


def install() -> str | None:
    """Install the filter on this process (every thread) and what it starts; None, or why not."""
    if not supported():
        return f"no seccomp filter on {platform.machine()} (x86-64 only)"
    prog = program()
    raw = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"PR_SET_NO_NEW_PRIVS failed (errno {ctypes.get_errno()})"
    rc = libc.syscall(
        ctypes.c_long(SYS_SECCOMP),
        ctypes.c_long(SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(fprog),
    )
    if rc != 0:
        err = ctypes.get_errno()
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
            return f"seccomp filter refused (errno {err}, then {ctypes.get_errno()})"
    return None


def filter_mode(pid: int) -> int | None:
    """``Seccomp:`` of /proc/<pid>/status (2: a filter), as the harness checks it from outside."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Seccomp:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None
