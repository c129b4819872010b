"""Where per-trace and per-candidate work runs: in this process (`local`, the default) or on a Ray
cluster (`ray`: `pip install 'kernel-headroom[fleet]'`), behind one small interface.

An `Engine` does two things:

* `map(fn, items, memory)`: one task per item, the results back in the items' order (a generator:
  the first is ready before the last has run). `fn` must be a module-level function and the items
  picklable: on Ray both travel to the worker that runs the task, which imports headroom itself.
* `pool(fn, items, on_dispatch)`: items spread over long-lived workers (Ray: one actor per GPU,
  one per CPU on a machine without one), `(index, result)` pairs as they finish. A worker that is lost
  mid-item has its item run again on another worker; each index is answered once.

The Ray engine (`headroom.fleet.ray_engine`) is imported by name when asked for, so neither
`import headroom` nor the local engine imports ray (`tests/test_fleet.py`; pyproject's contract).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

from headroom.errors import UserError
from headroom.extras import install_hint

T = TypeVar("T")
R = TypeVar("R")

ENGINES = ("local", "ray")


class Engine(Protocol):
    name: str

    def map(self, fn: Callable[[T], R], items: Sequence[T], memory: Sequence[int] | None = None) -> Iterator[R]: ...

    def pool(
        self, fn: Callable[[T], R], items: Sequence[T], on_dispatch: Callable[[object, int], None] | None = None
    ) -> Iterator[tuple[int, R]]: ...

    def close(self) -> None: ...


class LocalEngine:
    """Everything in this process, one item after the other (the default)."""

    name = "local"

    def map(self, fn: Callable[[T], R], items: Sequence[T], memory: Sequence[int] | None = None) -> Iterator[R]:
        for item in items:
            yield fn(item)

    def pool(
        self, fn: Callable[[T], R], items: Sequence[T], on_dispatch: Callable[[object, int], None] | None = None
    ) -> Iterator[tuple[int, R]]:
        for i, item in enumerate(items):
            if on_dispatch is not None:
                on_dispatch(None, i)
            yield i, fn(item)

    def close(self) -> None:
        pass


def get_engine(name: str = "local", address: str | None = None) -> Engine:
    """The engine called `name`; `address`: an existing Ray cluster (`ray://host:10001`, `host:6379`,
    `auto`), else a local one is started (or the one this process already joined is used)."""
    if name == "local":
        if address is not None:
            raise UserError("--address: only with --engine ray")
        return LocalEngine()
    if name != "ray":
        raise UserError(f"--engine {name}: expected one of {', '.join(ENGINES)}")
    try:
        module = importlib.import_module("headroom.fleet.ray_engine")  # by name: ray only when asked for
    except ImportError as e:
        raise UserError(
            f"--engine ray needs {e.name or 'ray'}, which is not installed: {install_hint('fleet')}"
        ) from None
    return module.RayEngine(address=address)
