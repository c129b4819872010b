"""Reaches for write access to the input ring, the memory the reference reads its inputs from.

A candidate that could write the ring could rewrite the inputs the reference is timed on next (in a
round that times the candidate first, the same inputs): zeros, or values that make the reference's
kernels slow. The attack takes the ring's descriptor as it arrives (it wraps the child's
``recv_handle``) and tries, in turn: a shared writable mapping of it, ``write``, a reopen of
``/proc/self/fd/N`` read-write and a writable mapping of that, and at its first forward an
``mprotect`` of its input's pages to writable. Whatever succeeds zeroes its inputs in the ring.

Expected: ``error`` (every way is refused: the ring is sealed ``F_SEAL_FUTURE_WRITE`` once the harness
holds its own mapping, and mapped ``PROT_READ`` in the child; the attack raises ``PermissionError``
naming each refusal), never ``pass``; a write that got through would fail ``no_input_mutation``.
"""

import ctypes
import mmap
import os
from multiprocessing import reduction

import torch
import torch.nn as nn

_recv = reduction.recv_handle
_refused: list[str] = []
_writable: list = []  # writable views of the ring it obtained


def _try(what: str, fn) -> None:
    try:
        got = fn()
    except OSError as e:
        _refused.append(f"{what}: {e.strerror}")
        return
    _writable.append(got)


def _reopen_map(fd: int, n: int):
    fd2 = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
    try:
        return mmap.mmap(fd2, n)
    finally:
        os.close(fd2)


def _recv_handle(conn):
    fd = _recv(conn)
    n = os.fstat(fd).st_size
    _try("mmap PROT_WRITE", lambda: mmap.mmap(fd, n))
    _try("write", lambda: os.pwrite(fd, b"\0" * 16, 0) and None)
    _try("reopen O_RDWR + mmap", lambda: _reopen_map(fd, n))
    return fd


reduction.recv_handle = _recv_handle
_libc = ctypes.CDLL(None, use_errno=True)


def _mprotect(x: torch.Tensor):
    page = mmap.PAGESIZE
    lo = x.data_ptr() // page * page
    hi = x.data_ptr() + x.numel() * x.element_size()
    if _libc.mprotect(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), mmap.PROT_READ | mmap.PROT_WRITE) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return x


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.tried = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.tried:
            self.tried = True
            _try("mprotect PROT_WRITE", lambda: _mprotect(x))
        if not _writable:
            raise PermissionError("the ring refused every write: " + "; ".join(_refused))
        out = torch.nn.functional.gelu(self.linear(x))
        for w in _writable:
            if isinstance(w, torch.Tensor):
                w.zero_()  # its inputs, as the reference will read them
            elif w is not None:
                w[:] = b"\0" * len(w)
        return out
