"""Memory the harness and a child both see: the input ring, and the child's outputs read in place.

The **ring** (``ring``) is a harness-owned buffer both processes map: a sealed memfd passed by
descriptor (CPU) or one raw CUDA allocation shared by the driver's IPC (GPU, ``cuda_ipc``). The harness
writes every input (correctness trials, memory and timing phases) into it
just before the command that uses it, while the child is frozen; commands
name views of it (``RingTensor``). So inputs never pass through the child's
hands before they are needed, both reference and candidate read the same
bytes, and the harness checks the inputs after a call by reading the ring
itself.

**Outputs** stay where the child put them. The child says where (an address
on a CPU, a CUDA IPC handle on a GPU) and the harness reads that memory
itself — all of it for a correctness trial, a few random elements of every
iteration's output for a timed phase, at positions chosen after the child has
answered. Whatever the child *says* about its outputs cannot make wrong memory
read right.
"""

from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING, Any

from headroom.verify import protocol as P

if TYPE_CHECKING:
    import numpy as np

ALIGN = 256
SPAN_FACTOR, SPAN_SLACK = 4, 1 << 16  # an output's strides may span at most this (a view of a larger buffer)
FULL_READ_BYTES = 4 << 20  # CPU: read a whole output span with one pread below this
_DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex128",
    "uint16",
    "uint32",
    "uint64",
    "float8_e4m3fn",
    "float8_e5m2",
)


def dtype_from_name(name: str) -> Any:
    import torch

    if name not in _DTYPES or not hasattr(torch, name):
        raise ValueError(f"unsupported dtype {name!r}")
    return getattr(torch, name)


def dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def span_elements(shape: tuple, stride: tuple) -> int:
    """Elements from element 0 to the last element of a strided view (0 when empty)."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, stride))


def _layout_stride(t: Any) -> tuple[int, ...]:
    """Keep a template's dense layout (a transposed input stays transposed); otherwise contiguous."""
    if t.is_contiguous() or t.numel() == 0:
        return tuple(_contiguous_stride(tuple(t.shape)))
    st = tuple(t.stride())
    if all(s > 0 for s in st) and span_elements(tuple(t.shape), st) == t.numel():
        return st
    return tuple(_contiguous_stride(tuple(t.shape)))


def _contiguous_stride(shape: tuple) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(s, 1)
    return list(reversed(out))


def view(buf: Any, ref: P.RingTensor) -> Any:
    """The tensor a ``RingTensor`` names, as a view of ``buf`` (the uint8 ring, in either process)."""
    dtype = dtype_from_name(ref.dtype)
    item = _itemsize(dtype)
    n = span_elements(ref.shape, ref.stride)
    if ref.offset < 0 or ref.offset % item or ref.offset + n * item > buf.numel():
        raise ValueError(f"ring view out of bounds: offset {ref.offset}, {n} x {item} bytes")
    flat = buf[ref.offset : ref.offset + max(n, 1) * item].view(dtype)
    return flat.as_strided(ref.shape, ref.stride)


def view_all(ring: Any, args: list) -> list:
    """The harness-side values of a command's arguments (ring views and scalars)."""
    return [view(ring.buf, a) if isinstance(a, P.RingTensor) else a.value for a in args]


def _itemsize(dtype: Any) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


def inputs_bytes(values: list) -> int:
    import torch

    return sum(_aligned(x.numel() * x.element_size()) for x in values if isinstance(x, torch.Tensor))


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# --- CUDA IPC ------------------------------------------------------------------------------


def share_cuda(t: Any) -> P.IpcTensor:
    """An IPC description of a CUDA tensor (the caller keeps ``t`` alive while it is used)."""
    storage = t._typed_storage()
    (device, handle, size_b, off_b, rc_handle, rc_off, ev_handle, ev_sync) = storage._share_cuda_()
    return P.IpcTensor(
        dtype=dtype_name(t.dtype),
        shape=tuple(t.shape),
        stride=tuple(t.stride()),
        offset=int(t.storage_offset()),
        device=int(device),
        handle=bytes(handle),
        storage_size=int(size_b),
        storage_offset=int(off_b),
        ref_counter_handle=bytes(rc_handle),
        ref_counter_offset=int(rc_off),
        event_handle=None if ev_handle is None else bytes(ev_handle),
        event_sync_required=bool(ev_sync),
    )


def open_ipc(m: P.IpcTensor) -> Any:
    """The tensor an IPC description names, mapped (not copied); validated against its storage size."""
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    dtype = dtype_from_name(m.dtype)
    item = _itemsize(dtype)
    if len(m.stride) != len(m.shape) or any(s < 0 for s in m.shape) or any(s < 0 for s in m.stride):
        raise ValueError("bad shape or stride")
    if (m.offset + span_elements(m.shape, m.stride)) * item > m.storage_size:
        raise ValueError("tensor does not fit its storage")
    return rebuild_cuda_tensor(
        torch.Tensor,
        torch.Size(m.shape),
        tuple(m.stride),
        m.offset,
        torch.storage.TypedStorage,
        dtype,
        m.device,
        m.handle,
        m.storage_size,
        m.storage_offset,
        False,
        m.ref_counter_handle,
        m.ref_counter_offset,
        m.event_handle,
        m.event_sync_required,
    )


# --- outputs: described by the child, read by the harness ------------------------------------------


def describe(t: Any, mode: str) -> P.Out:
    """Child side: where an output is (``mode``: addr | ipc | bytes)."""
    import torch

    if type(t) is not torch.Tensor:
        return P.Opaque(f"{type(t).__module__}.{type(t).__qualname__}")
    if mode == "ipc" and t.is_cuda and t.numel() > 0:
        return share_cuda(t)
    if mode == "bytes" or t.is_cuda:
        x = t.detach().contiguous().cpu()
        return P.BytesTensor(
            dtype_name(t.dtype), tuple(t.shape), x.reshape(-1).view(torch.uint8).numpy().tobytes() if x.numel() else b""
        )
    return P.AddrTensor(
        addr=int(t.data_ptr()), dtype=dtype_name(t.dtype), shape=tuple(t.shape), stride=tuple(t.stride())
    )


def check_structure(out: P.Out, max_numel: int) -> None:
    """Reject descriptions that cannot be a real output before reading anything (ValueError)."""
    if isinstance(out, P.Opaque):
        return
    dtype_from_name(out.dtype)
    if any(s < 0 for s in out.shape):
        raise ValueError("negative dimension")
    if math.prod(out.shape) > max_numel:
        raise ValueError(f"{math.prod(out.shape)} elements, more than the {max_numel} expected")
    stride = getattr(out, "stride", None)
    if stride is not None:
        if len(stride) != len(out.shape) or any(s < 0 for s in stride):
            raise ValueError("bad stride")
        span = span_elements(tuple(out.shape), tuple(stride))
        if span > SPAN_FACTOR * max(max_numel, 1) + SPAN_SLACK:
            raise ValueError(
                f"its strides span {span} elements for {math.prod(out.shape)}: more than "
                f"{SPAN_FACTOR}x the {max_numel} expected (the harness reads no such span)"
            )


def read_full(child: Any, out: P.Out, device: str) -> Any:
    """Harness side: a whole output, read from the child's memory (or its bytes)."""
    import torch

    dtype = dtype_from_name(out.dtype)  # type: ignore[union-attr]
    if isinstance(out, P.BytesTensor):
        n = math.prod(out.shape)
        if len(out.data) != n * _itemsize(dtype):
            raise ValueError("payload size does not match the shape")
        if n == 0:
            return torch.empty(out.shape, dtype=dtype, device=device)
        return torch.frombuffer(bytearray(out.data), dtype=torch.uint8).view(dtype).reshape(out.shape).to(device)
    if isinstance(out, P.IpcTensor):  # mapped, not copied: the child stays frozen while it is compared
        t = child.open_output(out)
        torch.cuda.current_stream(t.device).synchronize()
        return t
    if isinstance(out, P.SegTensor):  # a view of the segment's mapping (the child's phase is finished)
        item = _itemsize(dtype)
        base, first = child.segments.flat(out, item)
        span = span_elements(out.shape, out.stride)
        if (first + span) * item > base.numel():
            raise ValueError("output overruns its segment")
        if span == 0:
            return torch.empty(out.shape, dtype=dtype, device=device)
        typed = base[first * item : (first + span) * item].view(dtype)
        return typed.as_strided(out.shape, out.stride)
    n = span_elements(out.shape, out.stride)  # type: ignore[union-attr]
    if n == 0:
        return torch.empty(out.shape, dtype=dtype, device=device)  # type: ignore[union-attr]
    raw = child.read_memory(out.addr, n * _itemsize(dtype))  # type: ignore[union-attr]
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype)
    return flat.as_strided(out.shape, out.stride).contiguous().to(device)  # type: ignore[union-attr]


def sample_positions(numel: int, k: int, seed: int) -> Any:
    """``k`` flat positions drawn with ``seed`` (all of them when there are at most ``k``), as int64 numpy."""
    import numpy as np

    if numel <= k:
        return np.arange(numel, dtype=np.int64)
    return np.random.default_rng(seed & ((1 << 63) - 1)).integers(0, numel, k, dtype=np.int64)


def _storage_offsets(flat_idx: Any, shape: tuple, stride: tuple) -> Any:
    off = flat_idx.new_zeros(flat_idx.shape)
    rem = flat_idx.clone()
    for size, st in zip(reversed(shape), reversed(stride)):
        off += (rem % size) * st
        rem //= size
    return off


def read_samples(child: Any, out: P.Out, positions: Any) -> Any:
    """Harness side: the output's values at flat ``positions``, read from the child's memory now.

    On a GPU the read is a gather kernel on the mapped IPC memory (it waits on the child's IPC
    event, so work still queued on the child's stream is finished first: inside the clock); the
    result stays on the GPU until ``finish_samples``. The mapping stays open until the child's
    next command (``Child.open_output``), so each share is mapped once.
    """
    import torch

    dtype = dtype_from_name(out.dtype)  # type: ignore[union-attr]
    if isinstance(out, P.Opaque):
        raise ValueError(f"output is {out.type_name}, not a plain torch.Tensor")
    if isinstance(out, P.BytesTensor):
        return read_full(child, out, "cpu").reshape(-1)[positions]
    if any(s == 0 for s in out.shape):
        return torch.empty(0, dtype=dtype)
    if isinstance(out, P.IpcTensor):
        t = child.open_output(out)  # mapped until the child's next command
        offs = _storage_offsets(positions, out.shape, out.stride).to(t.device, non_blocking=True)
        base = t.as_strided((span_elements(out.shape, out.stride),), (1,), t.storage_offset())
        return base[offs]
    item = _itemsize(dtype)
    n = span_elements(out.shape, out.stride)
    offs = _storage_offsets(positions, out.shape, out.stride)
    if n * item <= FULL_READ_BYTES:
        raw = child.read_memory(out.addr, n * item)  # type: ignore[union-attr]
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype)[offs].clone()
    vals = torch.empty(positions.numel(), dtype=dtype)
    vb = vals.view(torch.uint8)
    for i, o in enumerate(offs.tolist()):
        vb[i * item : (i + 1) * item] = torch.frombuffer(
            bytearray(child.read_memory(out.addr + o * item, item)),  # type: ignore[union-attr]
            dtype=torch.uint8,
        )
    return vals


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc: Any = None
IOV_MAX = 1024


def _vm_read(pid: int, addrs: np.ndarray, item: int) -> bytes | None:
    """``item`` bytes at each address of another process, in one ``process_vm_readv`` per 1024
    (None when the call is refused: the caller falls back to ``/proc/<pid>/mem``, which says why).
    One system call for 256 elements instead of one ``pread`` each, or one read of a whole 4 MB output."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.process_vm_readv.restype = ctypes.c_ssize_t
    n = len(addrs)
    buf = ctypes.create_string_buffer(n * item)
    for s0 in range(0, n, IOV_MAX):
        chunk = addrs[s0 : s0 + IOV_MAX]
        k = len(chunk)
        local = _Iovec(ctypes.addressof(buf) + s0 * item, k * item)
        remote = (_Iovec * k)(*[_Iovec(int(a), item) for a in chunk])
        got = _libc.process_vm_readv(pid, ctypes.byref(local), 1, remote, k, 0)
        if got != k * item:
            return None
    return buf.raw


def gather_samples(child: Any, items: list[tuple[P.Out, Any]], device: str) -> list[Any]:
    """Values of many outputs at flat positions, read from the child's memory now, batched.

    GPU outputs described by segment (``gate``): one gather per (segment, dtype) on the harness's
    mappings, one copy to the host. CPU outputs: one ``process_vm_readv`` per output. Anything else
    goes through ``read_samples``. Returns CPU tensors, one per item, in order."""
    import numpy as np
    import torch

    out: list[Any] = [None] * len(items)
    groups: dict[tuple[int, str], list[tuple[int, Any]]] = {}
    for i, (o, pos) in enumerate(items):
        if isinstance(o, P.SegTensor) and child.segments is not None:
            if any(s == 0 for s in o.shape):
                out[i] = torch.empty(0, dtype=dtype_from_name(o.dtype))
                continue
            dtype = dtype_from_name(o.dtype)
            item = _itemsize(dtype)
            base, first = child.segments.flat(o, item)
            span = span_elements(o.shape, o.stride)
            if (first + span) * item > base.numel():
                raise ValueError(f"output of {span} x {item} bytes at {o.offset} overruns its segment")
            offs = first + _np_offsets(np.asarray(pos, dtype=np.int64), o.shape, o.stride)
            groups.setdefault((o.segment, o.dtype), []).append((i, offs))
        elif isinstance(o, P.AddrTensor):
            dtype = dtype_from_name(o.dtype)
            item = _itemsize(dtype)
            if any(s == 0 for s in o.shape):
                out[i] = torch.empty(0, dtype=dtype)
                continue
            offs = _np_offsets(np.asarray(pos, dtype=np.int64), o.shape, o.stride)
            raw = _vm_read(child.pid, o.addr + offs * item, item)
            if raw is None:
                out[i] = read_samples(child, o, torch.as_tensor(pos))
            else:
                out[i] = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).clone()
        else:
            v = read_samples(child, o, torch.as_tensor(pos))
            out[i] = v.cpu() if v.is_cuda else v
    if groups:
        # One copy of every index to the device, one gather per (segment, dtype), one copy back: a
        # phase's read is a few launches, not a round trip per sampled output.
        dev_of = {k: child.segments.flat(P.SegTensor(k[0], 0, k[1], (), ()), 1)[0].device for k in groups}
        order = [(k, i, offs) for k, rows in groups.items() for i, offs in rows]
        flat_idx = np.concatenate([offs for _, _, offs in order])
        device0 = next(iter(dev_of.values()))
        idx = torch.from_numpy(flat_idx).to(device0)
        parts, spans, a = [], [], 0
        for (sid, dname), rows in groups.items():
            dtype = dtype_from_name(dname)
            item = _itemsize(dtype)
            base, _ = child.segments.flat(P.SegTensor(sid, 0, dname, (), ()), item)
            typed = base[: base.numel() // item * item].view(dtype)
            b = a + sum(len(offs) for _, offs in rows)
            parts.append((dtype, typed[idx[a:b]]))
            spans.append(rows)
            a = b
        host = (
            [v.cpu() for _, v in parts]
            if len({d for d, _ in parts}) > 1
            else list(torch.cat([v for _, v in parts]).cpu().split([len(v) for _, v in parts]))
        )
        for rows, vals in zip(spans, host):  # waits for the gathers: inside the caller's clock
            k = 0
            for i, offs in rows:
                out[i] = vals[k : k + len(offs)]
                k += len(offs)
    return out


def _np_offsets(flat_idx: Any, shape: tuple, stride: tuple) -> Any:
    """Storage offsets (elements) of flat positions of a strided view (numpy: cheap on a few hundred)."""
    import numpy as np

    off = np.zeros(flat_idx.shape, dtype=np.int64)
    rem = flat_idx.copy()
    for size, st in zip(reversed(shape), reversed(stride)):
        off += (rem % size) * st
        rem //= size
    return off


def finish_samples(rows: list[list]) -> list[list]:
    """Wait for the GPU gathers of one phase and bring the samples to the host."""
    import torch

    if any(v.is_cuda for row in rows for v in row):
        torch.cuda.synchronize()
    return [[v.cpu() for v in row] for row in rows]


def read_outputs(child: Any, outs: list, max_numel: int, device: str, label: str, aggs: dict) -> list | None:
    """A trial's (or a capture's) outputs, read whole from the child's memory; None when one is not a plain
    tensor on the reference's device or is malformed (recorded in ``aggs["output_type"]``)."""
    bad = [o.type_name for o in outs if isinstance(o, P.Opaque)]
    if bad:
        aggs["output_type"].record(
            False,
            f"{label}: output is {bad[0]}, not a plain torch.Tensor (tensor subclasses and lazy tensors are rejected)",
        )
        return None
    read = []
    for j, o in enumerate(outs):
        on_cpu = isinstance(o, P.AddrTensor)
        if on_cpu == device.startswith("cuda") and not isinstance(o, P.BytesTensor):
            aggs["output_type"].record(
                False, f"{label}: output {j} is on the {'CPU' if on_cpu else 'GPU'}, the reference's on {device}"
            )
            return None
        try:
            check_structure(o, max_numel)
        except ValueError as e:
            aggs["output_type"].record(False, f"{label}: output {j}: {e}")
            return None
        read.append(read_full(child, o, device))
    return read
