"""Messages between the harness and its child processes, without pickle.

A child runs untrusted code, so nothing it sends may execute code in the
harness: a message is a JSON header followed by raw byte blobs, and tensors
are rebuilt by the harness itself, from bytes or from a CUDA IPC handle
(the same call ``torch.multiprocessing`` makes, with arguments the harness
validates). Parent-to-child messages use the same format.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

MAX_MESSAGE_BYTES = 1 << 36

_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
           "complex64", "complex128", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")


class ChildGone(Exception):
    """The child closed its end (crashed, exited or was killed)."""


class Timeout(Exception):
    """No message within the time limit."""


def send(conn: Any, header: dict, blobs: list | None = None) -> None:
    blobs = blobs or []
    conn.send_bytes(json.dumps({**header, "_blobs": len(blobs)}).encode())
    for b in blobs:
        conn.send_bytes(b)


def recv(conn: Any, deadline: float | None = None) -> tuple[dict, list[bytes]]:
    """The next message; raises Timeout after ``deadline`` (time.monotonic) and ChildGone on EOF."""

    def _one() -> bytes:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not conn.poll(left):
                raise Timeout()
        try:
            return conn.recv_bytes(MAX_MESSAGE_BYTES)
        except (EOFError, OSError, ConnectionError) as e:
            raise ChildGone(str(e)) from None

    raw = _one()
    try:
        header = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ChildGone(f"malformed message from child: {e}") from None
    if not isinstance(header, dict):
        raise ChildGone("malformed message from child: not an object")
    n = header.pop("_blobs", 0)
    if not isinstance(n, int) or n < 0 or n > 10_000:
        raise ChildGone("malformed message from child: bad blob count")
    return header, [_one() for _ in range(n)]


def dtype_from_name(name: str) -> Any:
    import torch

    if name not in _DTYPES or not hasattr(torch, name):
        raise ValueError(f"unsupported dtype {name!r}")
    return getattr(torch, name)


# --- tensors -------------------------------------------------------------------------


def encode_tensor(t: Any, blobs: list, mode: str = "bytes") -> dict:
    """Describe ``t`` and append its payload to ``blobs`` (child side)."""
    import torch

    dt = str(t.dtype).replace("torch.", "")
    meta: dict = {"dtype": dt, "shape": list(t.shape)}
    if mode == "ipc" and t.is_cuda and t.numel() > 0:
        x = t.detach().contiguous()
        storage = x._typed_storage()
        (device, handle, size_b, off_b, rc_handle, rc_off, ev_handle, ev_sync) = storage._share_cuda_()
        meta.update(kind="cuda_ipc", stride=list(x.stride()), offset=int(x.storage_offset()), device=int(device),
                    storage_size=int(size_b), storage_offset=int(off_b), ref_counter_offset=int(rc_off),
                    event_sync_required=bool(ev_sync),
                    handle=base64.b64encode(bytes(handle)).decode(),
                    ref_counter_handle=base64.b64encode(bytes(rc_handle)).decode(),
                    event_handle=None if ev_handle is None else base64.b64encode(bytes(ev_handle)).decode())
        meta["_keep"] = x  # the caller keeps the tensor alive until the harness acknowledges
        return meta
    x = t.detach().reshape(-1)
    if x.is_cuda:
        x = x.cpu()
    x = x.contiguous()
    meta.update(kind="bytes", blob=len(blobs))
    blobs.append(x.view(torch.uint8).numpy().tobytes() if x.numel() else b"")
    return meta


def public(meta: dict) -> dict:
    """A tensor description without the local keep-alive reference (for JSON)."""
    return {k: v for k, v in meta.items() if k != "_keep"}


def decode_tensor(meta: dict, blobs: list[bytes], device: Any) -> Any:
    """Rebuild a tensor the child described, as a fresh tensor on ``device`` (harness side)."""
    import math

    import torch

    dtype = dtype_from_name(str(meta.get("dtype")))
    shape = [int(s) for s in meta.get("shape", [])]
    if any(s < 0 for s in shape):
        raise ValueError("negative dimension")
    numel = math.prod(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    kind = meta.get("kind")
    if kind == "bytes":
        idx = int(meta["blob"])
        if not 0 <= idx < len(blobs):
            raise ValueError("bad blob index")
        raw = blobs[idx]
        if len(raw) != numel * itemsize:
            raise ValueError(f"payload has {len(raw)} bytes, expected {numel * itemsize}")
        if numel == 0:
            return torch.empty(shape, dtype=dtype, device=device)
        t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
        return t.to(device)
    if kind == "cuda_ipc":
        from torch.multiprocessing.reductions import rebuild_cuda_tensor

        stride = [int(s) for s in meta["stride"]]
        size_b = int(meta["storage_size"])
        offset = int(meta["offset"])
        if len(stride) != len(shape):
            raise ValueError("bad stride")
        if numel and (offset + sum((s - 1) * st for s, st in zip(shape, stride)) + 1) * itemsize > size_b:
            raise ValueError("tensor does not fit its storage")
        ev = meta.get("event_handle")
        t = rebuild_cuda_tensor(
            torch.Tensor, torch.Size(shape), tuple(stride), offset, torch.storage.TypedStorage, dtype,
            int(meta["device"]), base64.b64decode(meta["handle"]), size_b, int(meta["storage_offset"]), False,
            base64.b64decode(meta["ref_counter_handle"]), int(meta["ref_counter_offset"]),
            None if ev is None else base64.b64decode(ev), bool(meta["event_sync_required"]))
        out = t.to(device, copy=True)
        torch.cuda.current_stream(out.device).synchronize()
        del t
        return out
    raise ValueError(f"unknown tensor encoding {kind!r}")
