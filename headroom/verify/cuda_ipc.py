"""The GPU input ring as a raw CUDA allocation shared by the driver's IPC, outside torch's.

Why not ``torch.multiprocessing``'s CUDA sharing (``storage._share_cuda_``): the producer keeps a
shared block in its "limbo" until every consumer has decremented a reference counter in shared
memory, and a consumer decrements only when its own storage is freed. The harness kills its
children (a frozen child cannot be trusted to exit), so they never decrement: every ring the harness
ever shared stayed allocated. On the H200, KernelBench's level 1 ran out of memory that way after
~40 problems (193 MiB free of 141 GB; torch warned "Producer process terminated before all shared
CUDA tensors released"). Here the harness owns the allocation (``cuMemAlloc``) and frees it
(``cuMemFree``) when the ring is closed, after its children are gone; a child maps it with
``cuIpcOpenMemHandle`` and unmaps it (``cuIpcCloseMemHandle``) when it is re-mapped.

ctypes on the driver library (``libcuda.so.1``, present wherever torch runs on a GPU) because
torch exposes no raw IPC call and cuda-python is not a dependency; the calls are the five below.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from typing import Any

IPC_HANDLE_BYTES = 64
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * IPC_HANDLE_BYTES)]  # not c_char: that reads up to a NUL


_lib: Any = None


def _driver() -> Any:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL("libcuda.so.1")
        for name in ("cuMemAlloc_v2", "cuMemFree_v2", "cuIpcGetMemHandle", "cuIpcCloseMemHandle"):
            getattr(lib, name).restype = ctypes.c_int
        lib.cuIpcOpenMemHandle = getattr(lib, "cuIpcOpenMemHandle_v2", None) or lib.cuIpcOpenMemHandle  # type: ignore[attr-defined]
        lib.cuIpcOpenMemHandle.restype = ctypes.c_int
        lib.cuIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint]
        _lib = lib
    return _lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"CUDA driver error {rc} in {what}")


def _current_context(device: Any) -> None:
    """Make torch's primary context of ``device`` current in this thread (the driver calls use it)."""
    import torch

    torch.cuda.set_device(device)
    torch.cuda.synchronize(device)


class _Array:
    """``__cuda_array_interface__`` of raw device memory. torch keeps this object alive as long as any
    tensor views the memory, so ``release`` runs (free or unmap) only once the last view is gone: a
    view kept too long delays the release instead of reading freed memory."""

    def __init__(self, ptr: int, nbytes: int, release: Any):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "strides": None,
            "version": 2,
        }
        fin = weakref.finalize(self, release, ptr)
        fin.atexit = False  # at exit the process's memory goes with its context


def _as_tensor(ptr: int, nbytes: int, device: Any, release: Any) -> Any:
    import torch

    return torch.as_tensor(_Array(ptr, nbytes, release), device=device)


def _release(call: str, ptr: int) -> None:
    try:
        getattr(_driver(), call)(ctypes.c_uint64(ptr))
    except OSError:
        pass


_free = functools.partial(_release, "cuMemFree_v2")
_unmap = functools.partial(_release, "cuIpcCloseMemHandle")


class _View:
    tensor: Any

    def close(self) -> None:
        """Drop this view: the memory is freed (unmapped) once no other view of it is left."""
        self.tensor = None


class Allocation(_View):
    """Harness side: ``nbytes`` of device memory, a uint8 tensor view of it, and its IPC handle."""

    def __init__(self, nbytes: int, device: Any):
        _current_context(device)
        lib = _driver()
        ptr = ctypes.c_uint64(0)
        _check(lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)), f"cuMemAlloc({nbytes})")
        self.ptr = ptr.value
        self.nbytes = nbytes
        h = _Handle()
        rc = lib.cuIpcGetMemHandle(ctypes.byref(h), ctypes.c_uint64(self.ptr))
        if rc != 0:
            _free(self.ptr)
            _check(rc, "cuIpcGetMemHandle")
        self.handle = ctypes.string_at(ctypes.addressof(h), IPC_HANDLE_BYTES)
        self.tensor = _as_tensor(self.ptr, nbytes, device, _free)


class Mapping(_View):
    """Child side: the harness's allocation mapped into this process, as a uint8 tensor."""

    def __init__(self, handle: bytes, nbytes: int, device: Any):
        if len(handle) != IPC_HANDLE_BYTES:
            raise ValueError("bad CUDA IPC handle")
        _current_context(device)
        lib = _driver()
        h = _Handle()
        ctypes.memmove(ctypes.addressof(h), handle, IPC_HANDLE_BYTES)
        ptr = ctypes.c_uint64(0)
        _check(lib.cuIpcOpenMemHandle(ctypes.byref(ptr), h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
        self.ptr = ptr.value
        self.tensor = _as_tensor(self.ptr, nbytes, device, _unmap)
