"""Module ranges: one profiler range per call of every nn.Module that does work.

`record_module_ranges(model)` puts a forward pre-hook and a forward hook on each
module of `model` except pure containers (ModuleList, ModuleDict, Sequential, ...;
headroom/trace/ranges.py). While torch.profiler records, every call becomes a
range ``headroom/module <path> (<Class>)`` whose inputs are the call's tensors, so
``record_shapes`` stores the module's input shapes and dtypes on the range.
The analysis reads them back (headroom/trace/modules.py): every kernel gets its
innermost module, and backward kernels the module of the forward op that created
them (Kineto's fwdbwd flows). No backward hooks: they would wrap every output.

Cost, by design:
* The profiler off: each hook is one flag check (``torch.autograd.profiler._is_profiler_enabled``,
  the check Inductor's own ranges use); no range object is made.
* The profiler on: a C++ ``_RecordFunctionFast`` range (what Inductor uses for its kernels),
  not ``record_function`` (a dispatcher op, ~10x dearer per range).
* Inside ``torch.compile``d code the hooks do nothing (``torch.compiler.is_compiling()`` is
  True while Dynamo traces them, so the branch vanishes): no graph breaks, no guards on the
  profiler flag, no recompiles when the profiler starts. Modules that run compiled get no
  range, which is the truth: Inductor fuses across their boundaries.
  (lab/probes/module_ranges.py measures the cost; docs/modules.md has the numbers.)
"""

from __future__ import annotations

from typing import Any

from headroom.trace.ranges import CONTAINER_MODULES, module_range_name


def is_container(module: Any) -> bool:
    """A torch.nn container (exact class, not a subclass with a forward of its own)."""
    cls = type(module)
    return cls.__name__ in CONTAINER_MODULES and cls.__module__.startswith("torch.nn.")


def _is_compiled(module: Any) -> bool:
    """`torch.compile(module)`'s wrapper, or a module whose forward was replaced by a compiled one."""
    if type(module).__name__ == "OptimizedModule":
        return True
    forward = module.__dict__.get("forward")
    return forward is not None and hasattr(forward, "_torchdynamo_orig_callable")


def _tensors(args: tuple, kwargs: dict) -> list[Any]:
    """The call's tensor inputs (top level, and one level into tuples/lists: e.g. rotary (cos, sin))."""
    import torch

    out = []
    for v in (*args, *kwargs.values()):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            out.extend(x for x in v if isinstance(x, torch.Tensor))
    return out


def ranged_modules(model: Any, root: str = "model") -> list[tuple[str, Any]]:
    """(path, module) for every module `record_module_ranges` puts a range on."""
    out: list[tuple[str, Any]] = []
    skip: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(s) for s in skip):
            continue
        if _is_compiled(module):
            skip.append(f"{name}." if name else "")
            if type(module).__name__ == "OptimizedModule":
                continue
        if is_container(module):
            continue
        out.append((f"{root}.{name}" if name else root, module))
    return out


def record_module_ranges(model: Any, root: str = "model") -> list[Any]:
    """Record a range per call of each non-container module of `model`; returns the hook handles.

    Paths are `root` for `model` itself and ``root.<name>`` for the rest, with `<name>` as
    in ``model.named_modules()`` (so ``model.get_submodule(path[len(root) + 1:])`` finds it).
    Modules inside a ``torch.compile`` wrapper or with a compiled ``forward`` get no hooks
    below them (their calls run compiled). Remove the ranges with ``h.remove()`` for each
    handle.
    """
    import torch
    import torch.autograd.profiler as autograd_profiler
    from torch._C._profiler import _RecordFunctionFast

    is_compiling = torch.compiler.is_compiling
    handles: list[Any] = []
    for path, module in ranged_modules(model, root):
        range_name = module_range_name(path, type(module).__name__)
        open_ranges: list[Any] = []

        def enter(_module, args, kwargs, name=range_name, open_ranges=open_ranges):
            if is_compiling():  # traced by Dynamo: leave no trace, touch no state (no guards)
                return None
            if not autograd_profiler._is_profiler_enabled:
                open_ranges.append(None)
                return None
            rf = _RecordFunctionFast(name, _tensors(args, kwargs))
            rf.__enter__()
            open_ranges.append(rf)
            return None

        def leave(_module, _args, _output, open_ranges=open_ranges):
            if is_compiling() or not open_ranges:
                return None
            rf = open_ranges.pop()
            if rf is not None:
                rf.__exit__(None, None, None)
            return None

        # The range opens after the pre-hooks registered before it and closes before every other
        # hook, so it nests inside ranges that earlier hooks put around the same call (`--layers`
        # blocks: `headroom profile` registers those first).
        handles.append(module.register_forward_pre_hook(enter, with_kwargs=True))
        handles.append(module.register_forward_hook(leave, prepend=True, always_call=True))
    return handles
