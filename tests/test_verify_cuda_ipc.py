"""verify.cuda_ipc on a CPU: the IPC handle survives packing whole (ctypes' c_char would cut it at
the first NUL byte) and a malformed one is refused before the driver is touched. The GPU side runs
in test_verify_gpu_memory.py on the GPU machine."""

from __future__ import annotations

import ctypes

import pytest

from headroom.verify import cuda_ipc


def test_a_handle_with_nul_bytes_packs_and_unpacks_whole():
    raw = bytes([0, 7, 0, 0, 255]) + bytes(range(59))
    h = cuda_ipc._Handle()
    ctypes.memmove(ctypes.addressof(h), raw, cuda_ipc.IPC_HANDLE_BYTES)
    assert ctypes.string_at(ctypes.addressof(h), cuda_ipc.IPC_HANDLE_BYTES) == raw
    assert ctypes.sizeof(h) == 64


def test_a_short_handle_is_refused():
    with pytest.raises(ValueError, match="bad CUDA IPC handle"):
        cuda_ipc.Mapping(b"\0" * 63, 1 << 20, "cuda:0")


def test_the_array_interface_names_the_memory_and_its_release_runs_once_unreferenced():
    released = []
    a = cuda_ipc._Array(0xDEAD000, 4096, released.append)
    assert a.__cuda_array_interface__["data"] == (0xDEAD000, False)
    assert a.__cuda_array_interface__["shape"] == (4096,) and a.__cuda_array_interface__["typestr"] == "|u1"
    del a
    assert released == [0xDEAD000]
