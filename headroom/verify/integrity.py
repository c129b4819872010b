"""In-child tamper evidence: functions a candidate replaced, torch modes it left active.

The harness does not rely on anything in the candidate's process (its clock,
comparison and inputs are elsewhere), so this is evidence, not protection: a
candidate that monkey-patches timers, RNG, synchronisation, comparison or the
harness's own child-side code shows intent to tamper, and any reported
violation fails the ``integrity`` check. A candidate that hides its patches
gains nothing from them either.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

WATCHED = (
    "time.perf_counter",
    "time.perf_counter_ns",
    "time.monotonic",
    "time.monotonic_ns",
    "time.time",
    "time.time_ns",
    "time.process_time",
    "time.sleep",
    "builtins.type",
    "builtins.isinstance",
    "builtins.print",
    "torch.cuda.synchronize",
    "torch.cuda.current_stream",
    "torch.cuda.default_stream",
    "torch.cuda.set_stream",
    "torch.cuda.stream",
    "torch.cuda.Stream",
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize",
    "torch.cuda.Event.query",
    "torch.cuda.Event.wait",
    "torch.cuda.Stream.synchronize",
    "torch.cuda.Stream.wait_stream",
    "torch.cuda.Stream.record_event",
    "torch.cuda.graph",
    "torch.cuda.graph.__enter__",
    "torch.cuda.graph.__exit__",
    "torch.cuda.CUDAGraph",
    "torch.cuda.CUDAGraph.capture_begin",
    "torch.cuda.CUDAGraph.capture_end",
    "torch.cuda.CUDAGraph.replay",
    "torch.cuda.max_memory_allocated",
    "torch.cuda.memory_allocated",
    "torch.cuda.reset_peak_memory_stats",
    "torch.cuda.memory_stats",
    "torch.cuda.empty_cache",
    "torch.cuda.mem_get_info",
    "torch._C._cuda_synchronize",
    "torch._C._cuda_getCurrentStream",
    "torch.manual_seed",
    "torch.random.manual_seed",
    "torch.cuda.manual_seed",
    "torch.cuda.manual_seed_all",
    "torch.seed",
    "torch.Generator",
    "torch.randn",
    "torch.rand",
    "torch.randint",
    "torch.randperm",
    "torch.normal",
    "torch.empty",
    "torch.empty_like",
    "torch.zeros",
    "torch.ones",
    "torch.full",
    "torch.arange",
    "torch.equal",
    "torch.allclose",
    "torch.isfinite",
    "torch.from_file",
    "torch.device",
    "torch.use_deterministic_algorithms",
    "torch.are_deterministic_algorithms_enabled",
    "torch.nn.Module.__call__",
    "torch.nn.Module._call_impl",
    "torch.nn.Module.to",
    "torch.Tensor.__torch_function__",
    "torch.Tensor.__torch_dispatch__",
    "torch.Tensor.clone",
    "torch.Tensor.copy_",
    "torch.Tensor.contiguous",
    "torch.Tensor.to",
    "torch.Tensor.cpu",
    "torch.Tensor.view",
    "torch.Tensor.reshape",
    "torch.Tensor.numel",
    "torch.Tensor.data_ptr",
    "torch.Tensor.storage_offset",
    "torch.Tensor.untyped_storage",
    "torch.Tensor._typed_storage",
    "torch.Tensor.stride",
    "torch.Tensor.detach",
    "torch.Tensor.element_size",
    "torch.Tensor.as_strided",
    "torch.Tensor.shape",
    "torch.Tensor.dtype",
    "multiprocessing.connection.Connection.send_bytes",
    "multiprocessing.connection.Connection.recv_bytes",
    "multiprocessing.connection.Connection.poll",
    "multiprocessing.connection.Connection._send_bytes",
    "multiprocessing.connection.Connection._recv_bytes",
    "multiprocessing.connection.Connection._send",
    "multiprocessing.connection.Connection._recv",
    "os._exit",
    "os.write",
    "os.read",
    "msgspec.msgpack.Encoder.encode",
    "msgspec.msgpack.Decoder.decode",
)
OWN_MODULES = (
    "headroom.verify.child",
    "headroom.verify.protocol",
    "headroom.verify.shared",
    "headroom.verify.problem",
    "headroom.verify.integrity",
    "headroom.verify.ring",
    "headroom.verify.child_state",
    "headroom.verify.child_memory",
    "headroom.verify.child_capture",
)


def _split(dotted: str) -> tuple[str, list[str]]:
    """(the longest importable module prefix, the attribute path after it)."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        return ".".join(parts[:i]), parts[i:]
    raise AttributeError(dotted)


def _static(obj: Any, name: str) -> Any:
    """``inspect.getattr_static`` (no descriptor runs), the module and class cases done directly (fast)."""
    if isinstance(obj, types.ModuleType):
        return obj.__dict__[name]
    if isinstance(obj, type):
        for k in obj.__mro__:
            if name in k.__dict__:
                return k.__dict__[name]
        raise AttributeError(name)
    return inspect.getattr_static(obj, name)


def _walk(modname: str, path: list[str]) -> Any:
    obj: Any = sys.modules[modname]
    for p in path:
        obj = _static(obj, p)
    return obj


def snapshot() -> dict[str, tuple[str, list[str], Any, Any]]:
    """The objects behind every watched name and the harness's own child-side functions.

    Each entry keeps its module object and attribute path, so a check is a few ``getattr_static``
    calls (resolving each name by import again cost 7 ms per reply, inside a timed phase)."""
    snap: dict[str, tuple[str, list[str], Any, Any]] = {}
    for name in WATCHED:
        try:
            modname, path = _split(name)
            snap[name] = (modname, path, sys.modules[modname], _walk(modname, path))
        except Exception:
            continue
    for modname in OWN_MODULES:
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        for k, v in vars(mod).items():
            if callable(v) and not k.startswith("__"):
                snap[f"{modname}.{k}"] = (modname, [k], mod, v)
    return snap


def violations(snap: dict[str, tuple[str, list[str], Any, Any]]) -> list[str]:
    """What was replaced since ``snap`` (or a module swapped in ``sys.modules``), plus active torch
    modes and trace hooks."""
    import torch

    bad = []
    for name, (modname, path, mod, obj) in snap.items():
        try:
            if sys.modules.get(modname) is not mod:
                bad.append(f"{name} (module replaced)")
                continue
            now = _walk(modname, path)
        except Exception:
            bad.append(f"{name} (deleted)")
            continue
        if now is not obj:
            bad.append(name)
    try:
        if torch._C._len_torch_function_stack() > 0:
            bad.append("a torch function mode is active (TorchFunctionMode left entered)")
        if torch._C._len_torch_dispatch_stack() > 0:
            bad.append("a torch dispatch mode is active (TorchDispatchMode left entered)")
    except AttributeError:  # pragma: no cover
        pass
    if sys.gettrace() is not None or sys.getprofile() is not None:
        bad.append("a sys.settrace/setprofile hook is installed")
    return bad
