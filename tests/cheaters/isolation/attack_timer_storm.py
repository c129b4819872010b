"""Arms thousands of one-shot kernel timers in its untimed time, to fire while the reference is timed.

A frozen cgroup runs none of the candidate's tasks, but a timer it armed still fires: its interrupt
runs on the CPU it was armed on, whatever is running there, and the time it takes is charged to that
task — the reference's timed phase, with no run-queue wait to show it. Each forward arms timerfds
(and a repeating ``ITIMER_REAL``) spread over the next seconds, then computes the problem's own math.

Expected: ``error`` at import (the seccomp filter refuses ``timerfd_create``: the attack does not
hide the refusal); with the filter off, the reference's CPU time per forward over its calibration and
the round orders are what is left to catch it (docs/verify.md, "Threat model").
"""

import ctypes
import os
import signal

import torch
import torch.nn as nn

_libc = ctypes.CDLL(None, use_errno=True)
CLOCK_MONOTONIC = 1
TIMERS = int(os.environ.get("HEADROOM_TEST_TIMERS", "2000"))


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("interval", _Timespec), ("value", _Timespec)]


_fds: list[int] = []


def _arm(n: int) -> None:
    """n one-shot timers, one every 50 us from 1 ms to ~n * 50 us from now (old ones re-armed)."""
    while len(_fds) < n:
        fd = _libc.timerfd_create(CLOCK_MONOTONIC, 0o4000)  # TFD_NONBLOCK
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create refused: " + os.strerror(ctypes.get_errno()))
        _fds.append(fd)
    for i, fd in enumerate(_fds[:n]):
        ns = 1_000_000 + 50_000 * i
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(ns // 1_000_000_000, ns % 1_000_000_000))
        if _libc.timerfd_settime(fd, 0, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime refused")


_arm(TIMERS)
signal.signal(signal.SIGALRM, signal.SIG_IGN)
signal.setitimer(signal.ITIMER_REAL, 0.001, 0.00002)  # every 20 us: while frozen too


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _arm(TIMERS)
        return torch.nn.functional.gelu(self.linear(x))
