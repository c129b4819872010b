"""The input ring: the harness's buffer of every command's inputs, which both children map.

CPU: a memfd (``memfd_create``) sealed against shrinking and growing (``F_SEAL_SHRINK``,
``F_SEAL_GROW``) and, once the harness holds its own writable mapping, against every later write
(``F_SEAL_FUTURE_WRITE``: no ``write``, no new shared writable mapping, no ``mprotect`` of a mapping
to writable, through this descriptor or any reopened one), then ``F_SEAL_SEAL``; mode 0600, sent to
each child as a descriptor over its command pipe (``SCM_RIGHTS``) right after ``MapRing``. Every child
maps it ``PROT_READ``: the harness alone writes the inputs the reference will read. It has no path:
no child can swap the file another maps, and none can truncate it so that the harness's next write
faults (``SIGBUS``, the harness dead with the child's cgroup and files left behind). GPU: one raw
CUDA allocation shared by the driver's IPC (``cuda_ipc``), outside torch's allocator, which the
legacy IPC maps read-write in the child (``no_input_mutation`` digests it after every phase).
"""

from __future__ import annotations

import fcntl
import itertools
import mmap
import os
from typing import Any

from headroom.verify import protocol as P
from headroom.verify.shared import ALIGN, _aligned, _layout_stride, dtype_name, span_elements, view  # noqa: F401

_GENERATION = itertools.count(1)
F_SEAL_FUTURE_WRITE = getattr(fcntl, "F_SEAL_FUTURE_WRITE", 0x0010)  # Linux 5.1; not in Python 3.11's fcntl
SIZE_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
SEALS = SIZE_SEALS | F_SEAL_FUTURE_WRITE | fcntl.F_SEAL_SEAL


def sealed_memfd(nbytes: int) -> tuple[int, mmap.mmap]:
    """An anonymous shared file of ``nbytes`` and the harness's writable mapping of it: nobody can resize
    it, reopen it but its owner, or write it but through that mapping (the seals)."""
    fd = os.memfd_create("headroom-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, nbytes)
        os.fchmod(fd, 0o600)  # a reopen through /proc/<pid>/fd by another uid is refused
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SIZE_SEALS)
        m = mmap.mmap(fd, nbytes)  # before the write seal: existing writable mappings keep working
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, F_SEAL_FUTURE_WRITE | fcntl.F_SEAL_SEAL)
        except OSError:  # a kernel before 5.1: children still map it read-only, a candidate could map it writable
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd, m


def write_sealed(fd: int) -> bool:
    """Whether the ring refuses every write but the harness's mapping (``F_SEAL_FUTURE_WRITE``)."""
    return bool(fcntl.fcntl(fd, fcntl.F_GET_SEALS) & F_SEAL_FUTURE_WRITE)


def send_ring(conn: Any, ring: Ring, pid: int) -> None:
    """The harness's half of ``map_ring``: the ring's descriptor over the child's command pipe."""
    from multiprocessing import reduction

    assert ring.fd is not None, "a CPU ring is a descriptor"
    reduction.send_handle(conn, ring.fd, pid)


class Ring:
    """The harness's shared input buffer (see the module docstring)."""

    def __init__(self, nbytes: int, device: str):
        import torch

        self.device = device
        self.generation = next(_GENERATION)  # children re-map when it changes
        self.nbytes = max(_aligned(int(nbytes)), 1 << 16)
        self.fd: int | None = None  # CPU: the sealed memfd, passed to each child by descriptor
        self._map: Any = None
        self._staging: Any = None  # the harness's copy of a gated phase's inputs (stage, commit)
        if device.startswith("cuda"):
            from headroom.verify.cuda_ipc import Allocation

            self.nbytes = (self.nbytes + (2 << 20) - 1) // (2 << 20) * (2 << 20)
            self._cuda = Allocation(self.nbytes, torch.device(device))  # outside torch's allocator and its IPC limbo
            self.buf = self._cuda.tensor
            self.spec = P.RingSpec(nbytes=self.nbytes, cuda_handle=self._cuda.handle)
        else:
            self.fd, self._map = sealed_memfd(self.nbytes)
            self.buf = torch.frombuffer(self._map, dtype=torch.uint8)
            self.spec = P.RingSpec(nbytes=self.nbytes, memfd=True)

    def place(
        self, sets: list[list], layout: list[list] | None = None, write: bool = True
    ) -> tuple[list[list], list[list]]:
        """Write input sets into the ring; returns (args per set, harness-side views per set).

        ``layout`` (args of an earlier ``place``) writes the new values at the same offsets (same
        ``data_ptr`` in the child: the scaled and shifted trials).
        """
        import torch

        args_out: list[list] = []
        views_out: list[list] = []
        cursor = 0
        for si, values in enumerate(sets):
            args: list = []
            views: list = []
            for vi, x in enumerate(values):
                if not isinstance(x, torch.Tensor):
                    if not (x is None or isinstance(x, (bool, int, float))):
                        raise TypeError(f"unsupported input type {type(x).__name__} (tensors, numbers, None)")
                    args.append(P.Scalar(x))
                    views.append(x)
                    continue
                if layout is not None:
                    ref = layout[si][vi]
                    if not isinstance(ref, P.RingTensor) or tuple(ref.shape) != tuple(x.shape):
                        raise ValueError("layout does not match the inputs")
                else:
                    stride = _layout_stride(x)
                    nbytes = span_elements(tuple(x.shape), stride) * x.element_size()
                    ref = P.RingTensor(cursor, dtype_name(x.dtype), tuple(x.shape), stride)
                    cursor += _aligned(max(nbytes, 1))
                    if cursor > self.nbytes:
                        raise MemoryError(f"inputs need more than the ring's {self.nbytes} bytes")
                v = view(self.buf, ref)
                if write:
                    v.copy_(x)
                args.append(ref)
                views.append(v)
            args_out.append(args)
            views_out.append(views)
        if write and self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)
        return args_out, views_out

    def stage(self, sets: list[list], layout: list[list]) -> int:
        """Lay input sets out in the harness's own copy of the ring, at ``layout``'s offsets; returns the
        bytes ``commit`` copies.

        Not timed: the values (and whatever made them) are complete when this returns, so the write
        a gated phase times is one device copy of a fixed size, not a copy per tensor after the
        harness's own generation of the values."""
        import torch

        end = 0
        for si, values in enumerate(sets):
            for vi, x in enumerate(values):
                ref = layout[si][vi]
                if isinstance(x, torch.Tensor) and isinstance(ref, P.RingTensor):
                    end = max(end, ref.offset + span_elements(ref.shape, ref.stride) * x.element_size())
        if self._staging is None or self._staging.numel() < end:
            self._staging = None  # only what the phase's inputs span: not the ring's slack
            self._staging = torch.empty(end, dtype=torch.uint8, device=self.buf.device)
        for si, values in enumerate(sets):
            for vi, x in enumerate(values):
                ref = layout[si][vi]
                if isinstance(x, torch.Tensor) and isinstance(ref, P.RingTensor):
                    view(self._staging, ref).copy_(x)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)
        return end

    def scrub(self, nbytes: int) -> None:
        """Overwrite the first ``nbytes`` with 0xFF (NaN; -1 for integers), complete on return: what the
        ring held for the previous phase is gone before an untrusted child is thawed ahead of its inputs."""
        import torch

        if nbytes <= 0:
            return
        self.buf[:nbytes].fill_(0xFF)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)

    def commit(self, nbytes: int) -> None:
        """Copy the staged bytes into the ring: one copy, complete on return."""
        import torch

        if nbytes <= 0 or self._staging is None:
            return
        self.buf[:nbytes].copy_(self._staging[:nbytes])
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)

    def close(self) -> None:
        self._staging = None
        self.buf = None
        if self.device.startswith("cuda"):
            # the raw allocation is freed with its last view; no tensor of the harness's own is ever
            # placed in it, so a child that kept its mapping cannot see one
            self._cuda.close()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self._map = None  # unmapped once no view of it is left


def map_ring(spec: P.RingSpec, device: Any, conn: Any = None) -> Any:
    """The ring in the child: the memfd the harness sends after ``MapRing`` (on ``conn``), mapped
    read-only, or the same CUDA allocation."""
    import warnings

    import torch

    if spec.memfd:
        from multiprocessing import reduction

        fd = reduction.recv_handle(conn)
        try:
            if os.fstat(fd).st_size != spec.nbytes:
                raise ValueError("the ring's descriptor is not the ring's size")
            m = mmap.mmap(fd, spec.nbytes, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        with warnings.catch_warnings():  # "the given buffer is not writable": by design, a write faults
            warnings.simplefilter("ignore", UserWarning)
            return torch.frombuffer(m, dtype=torch.uint8)
    if spec.cuda_handle is None:
        raise ValueError("ring without a location")
    from headroom.verify.cuda_ipc import Mapping

    return Mapping(spec.cuda_handle, spec.nbytes, device).tensor  # unmapped when its last view is gone
