"""The GPU clock of a timed phase: a gated stream, a flag written back, and outputs mapped once.

**Why a gate.** Timing a candidate from the harness means waking the child, a message each way and
reading samples of its outputs; on the H200 that was 10-20 ms per phase, as long as the phase, and
a forward loop launched from Python measured the launcher, not the kernel (an RMSNorm that runs
33 us inside the model timed 165 us). So the GPU work of a phase is queued before the clock starts
and released by the harness:

1. the child enqueues, on its stream, a wait on a word of a page of host memory both processes map
   (``cuStreamWaitValue32``), then its ``n`` forwards, then a write of the phase's token to a second
   word (``cuStreamWriteValue32``), describes its outputs and replies; the harness has timed that
   enqueue on its own clock (the CPU cost of a call, unprofiled);
2. the harness freezes the child (its CPU does nothing more), starts its clock and writes the token
   into the gate word: the queued forwards now run back to back, as in a GPU-bound model;
3. the harness spins on the flag word (host memory: no GPU work of its own competes with the child's),
   then gathers samples of the outputs through mappings opened once per segment, and stops its clock
   when they are on the host.

What a child can do to this: write the flag early, or run work on a stream the gate does not hold.
Work still running when the harness's gather reads shows as wrong samples (fail); work that ends
before the gather is inside the clock. The gather's own cost subtracted is the reference's
(trusted code), never the candidate's. Work run *before* the gate opens would escape the clock, so
the inputs of a phase are written into the ring only after the child has replied and been frozen:
before that the ring holds the previous phase's inputs.

**Segments.** A timed output is described as (segment, byte offset): the CUDA allocation holding it
(``cuPointerGetAttributes``: its start, size and the driver's buffer id, unique per allocation)
is shared once by ``cuIpcGetMemHandle`` and mapped once by the harness, so a phase opens no IPC
handle and creates no IPC event (torch's sharing did both per output per iteration).

ctypes on the driver library, as ``cuda_ipc`` (torch exposes none of these calls).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile
import time
from typing import Any

from headroom.verify import protocol as P
from headroom.verify.cuda_ipc import IPC_HANDLE_BYTES, Mapping, _check, _driver, _Handle

PAGE = 4096
SLOTS = 256  # children per clock page (one slot each): gate words 0..255, flag words 256..511
_FLAG = SLOTS
CU_MEMHOSTREGISTER_PORTABLE = 1
CU_MEMHOSTREGISTER_DEVICEMAP = 2
CU_STREAM_WAIT_VALUE_GEQ = 0
CU_POINTER_ATTRIBUTE_BUFFER_ID = 7
CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12
_lib_ops: Any = None


def _ops() -> Any:
    """The driver with the stream memory operations' and pointer-attribute signatures set."""
    global _lib_ops
    if _lib_ops is None:
        lib = _driver()
        for name in (
            "cuStreamWaitValue32_v2",
            "cuStreamWriteValue32_v2",
            "cuMemHostRegister_v2",
            "cuMemHostGetDevicePointer_v2",
            "cuPointerGetAttributes",
            "cuMemHostUnregister",
        ):
            getattr(lib, name).restype = ctypes.c_int
        lib.cuStreamWaitValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        lib.cuStreamWriteValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        _lib_ops = lib
    return _lib_ops


# --- harness side -------------------------------------------------------------------------------


class ClockPage:
    """A page of shared host memory: one gate word and one flag word per child slot."""

    def __init__(self) -> None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        fd, self.path = tempfile.mkstemp(prefix="headroom-clock-", dir=base)
        try:
            os.ftruncate(fd, PAGE)
            self._mm = mmap.mmap(fd, PAGE)
        finally:
            os.close(fd)
        self._words = (ctypes.c_uint32 * (PAGE // 4)).from_buffer(self._mm)
        self._next_slot = 0
        self._token = 0

    def slot(self) -> int:
        s = self._next_slot % SLOTS
        self._next_slot += 1
        self._words[s] = 0
        self._words[_FLAG + s] = 0
        return s

    def token(self) -> int:
        self._token = (self._token + 1) % (1 << 31) or 1
        return self._token

    def open(self, slot: int, token: int) -> None:
        self._words[slot] = token

    def flag(self, slot: int) -> int:
        return int(self._words[_FLAG + slot])

    def wait_flag(self, slot: int, token: int, timeout_s: float) -> bool:
        """Spin until the child's stream has written ``token`` (True) or ``timeout_s`` passed (False).

        A spin on host memory, not a GPU wait: the harness puts no work of its own on the GPU while
        the child's forwards run (two contexts on one GPU are time-sliced)."""
        words, i = self._words, _FLAG + slot
        if words[i] == token:
            return True
        deadline = time.perf_counter() + timeout_s
        spins = 0
        while words[i] != token:
            spins += 1
            if spins & 0x3FF == 0:
                now = time.perf_counter()
                if now > deadline:
                    return False
                if spins > 1 << 22:  # a long phase: stop burning a core at full speed
                    time.sleep(50e-6)
        return True

    def close(self) -> None:
        try:
            del self._words
            self._mm.close()
        except (BufferError, AttributeError, ValueError):
            pass
        try:
            os.unlink(self.path)
        except OSError:
            pass


class SegmentMaps:
    """The harness's mappings of one child's output segments (opened once each, kept for the child's life)."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.maps: dict[int, Any] = {}
        self.sizes: dict[int, int] = {}

    def add(self, segs: list[P.Segment]) -> None:
        for s in segs:
            if s.id in self.maps:
                continue
            if len(s.handle) != IPC_HANDLE_BYTES or s.size <= 0:
                raise ValueError(f"segment {s.id}: malformed IPC handle or size")
            self.maps[s.id] = Mapping(s.handle, s.size, self.device)
            self.sizes[s.id] = s.size

    def flat(self, out: P.SegTensor, item: int) -> tuple[Any, int]:
        """(the segment as a uint8 tensor, the element index of the output's element 0 in ``item`` units)."""
        m = self.maps.get(out.segment)
        if m is None:
            raise ValueError(f"segment {out.segment} was never shared")
        if out.offset < 0 or out.offset % item:
            raise ValueError(f"byte offset {out.offset} is not a multiple of the element size {item}")
        return m.tensor, out.offset // item

    def close(self) -> None:
        for m in self.maps.values():
            m.close()
        self.maps.clear()


# --- child side ---------------------------------------------------------------------------------


class StreamClock:
    """Child side: the clock page registered with the driver, and the gate/flag operations on a stream."""

    def __init__(self, path: str, slot: int, device: Any) -> None:
        from headroom.verify.cuda_ipc import _current_context

        _current_context(device)  # registering host memory needs a current context (error 201 without)
        lib = _ops()
        fd = os.open(path, os.O_RDWR)
        try:
            self._mm = mmap.mmap(fd, PAGE)
        finally:
            os.close(fd)
        self._addr = ctypes.addressof(ctypes.c_char.from_buffer(self._mm))
        _check(
            lib.cuMemHostRegister_v2(
                ctypes.c_void_p(self._addr),
                ctypes.c_size_t(PAGE),
                ctypes.c_uint(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
            ),
            "cuMemHostRegister",
        )
        dptr = ctypes.c_uint64(0)
        _check(
            lib.cuMemHostGetDevicePointer_v2(ctypes.byref(dptr), ctypes.c_void_p(self._addr), ctypes.c_uint(0)),
            "cuMemHostGetDevicePointer",
        )
        self.gate = dptr.value + 4 * slot
        self.flag = dptr.value + 4 * (_FLAG + slot)

    def wait(self, stream: int, token: int) -> None:
        _check(
            _ops().cuStreamWaitValue32_v2(ctypes.c_void_p(stream), self.gate, token, CU_STREAM_WAIT_VALUE_GEQ),
            "cuStreamWaitValue32",
        )

    def signal(self, stream: int, token: int) -> None:
        _check(_ops().cuStreamWriteValue32_v2(ctypes.c_void_p(stream), self.flag, token, 0), "cuStreamWriteValue32")


class Segments:
    """Child side: which allocation each output lives in; each allocation's IPC handle is sent once."""

    def __init__(self) -> None:
        self.shared: dict[int, int] = {}  # buffer id -> start address
        self.new: list[P.Segment] = []
        n = 3
        self._attrs = (ctypes.c_int * n)(
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID
        )
        self._start, self._size, self._id = ctypes.c_uint64(0), ctypes.c_size_t(0), ctypes.c_uint64(0)
        self._data = (ctypes.c_void_p * n)(
            ctypes.addressof(self._start), ctypes.addressof(self._size), ctypes.addressof(self._id)
        )

    def describe(self, t: Any) -> P.SegTensor:
        from headroom.verify.shared import dtype_name

        ptr = int(t.data_ptr())
        _check(
            _ops().cuPointerGetAttributes(ctypes.c_uint(3), self._attrs, self._data, ctypes.c_uint64(ptr)),
            "cuPointerGetAttributes",
        )
        sid, start = int(self._id.value), int(self._start.value)
        if sid not in self.shared:
            h = _Handle()
            _check(_driver().cuIpcGetMemHandle(ctypes.byref(h), ctypes.c_uint64(start)), "cuIpcGetMemHandle")
            self.new.append(
                P.Segment(
                    id=sid, handle=ctypes.string_at(ctypes.addressof(h), IPC_HANDLE_BYTES), size=int(self._size.value)
                )
            )
            self.shared[sid] = start
        return P.SegTensor(
            segment=sid, offset=ptr - start, dtype=dtype_name(t.dtype), shape=tuple(t.shape), stride=tuple(t.stride())
        )

    def take_new(self) -> list[P.Segment]:
        out, self.new = self.new, []
        return out
