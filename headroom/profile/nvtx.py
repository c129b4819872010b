"""Named ranges seen by both torch.profiler (record_function) and Nsight (NVTX)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from headroom.trace.ranges import BLOCK_RANGE_PREFIX


class _Range:
    """A profiler range (record_function) plus an NVTX range, opened and closed by hooks."""

    def __init__(self, name: str):
        from torch.autograd.profiler import record_function

        self.name = name
        self._rf = record_function(name)

    def enter(self) -> None:
        self._rf.__enter__()
        nvtx_push(self.name)

    def exit(self) -> None:
        nvtx_pop()
        self._rf.__exit__(None, None, None)


def instrument_blocks(blocks: Sequence[tuple[str, Any]], train: bool) -> list[Any]:
    """Mark each block's forward (and, when training, backward) with a named range.

    The ranges (`headroom/block <module path>` and `... backward`) let `--layers`
    split kernel time into per-block and once-per-step work. Returns hook handles.
    """
    handles = []
    for path, module in blocks:
        fwd = _Range(f"{BLOCK_RANGE_PREFIX}{path}")
        handles.append(module.register_forward_pre_hook(lambda m, a, r=fwd: r.enter()))
        handles.append(module.register_forward_hook(lambda m, a, o, r=fwd: r.exit()))
        if train:
            bwd = _Range(f"{BLOCK_RANGE_PREFIX}{path} backward")
            handles.append(module.register_full_backward_pre_hook(lambda m, g, r=bwd: r.enter()))
            handles.append(module.register_full_backward_hook(lambda m, gi, go, r=bwd: r.exit()))
    return handles


# NVTX: the `nvtx` package when installed, else torch.cuda.nvtx on CUDA builds, else nothing.
_NVTX: Any = None


def _nvtx_impl() -> Any:
    global _NVTX
    if _NVTX is None:
        impl: Any = False
        try:
            import nvtx as _nv  # noqa: F401

            impl = ("nvtx", _nv)
        except Exception:
            try:
                import torch

                if torch.cuda.is_available():
                    impl = ("torch", torch.cuda.nvtx)
            except Exception:
                impl = False
        _NVTX = impl
    return _NVTX


def nvtx_push(name: str) -> None:
    impl = _nvtx_impl()
    if not impl:
        return
    backend, mod = impl
    if backend == "nvtx":
        mod.push_range(name, domain="headroom")
    else:
        mod.range_push(name)


def nvtx_pop() -> None:
    impl = _nvtx_impl()
    if not impl:
        return
    backend, mod = impl
    if backend == "nvtx":
        mod.pop_range(domain="headroom")
    else:
        mod.range_pop()


@contextlib.contextmanager
def phase_range(name: str) -> Iterator[None]:
    """A named range seen by both torch.profiler (record_function) and Nsight (NVTX)."""
    from torch.autograd.profiler import record_function

    nvtx_push(name)
    try:
        with record_function(name):
            yield
    finally:
        nvtx_pop()


def nvtx_backend() -> str:
    impl = _nvtx_impl()
    return impl[0] if impl else "none"
