"""The Ray engine (headroom.fleet's interface): tasks for `map`, an actor pool for `pool`.

The only module of headroom that imports ray; `headroom.fleet.get_engine("ray")` loads it by name.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

LOST = (RayActorError, ActorDiedError, ActorUnavailableError)
ATTEMPTS = 3  # an item whose worker is lost this many times fails the run


def _call(fn, item):
    return fn(item)


class _Worker:
    """A long-lived worker of `pool` (an actor): runs what it is given, one item at a time."""

    def run(self, fn, item):
        return fn(item)

    def pid(self) -> int:
        return os.getpid()


class RayEngine:
    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        self.started = False
        if not ray.is_initialized():
            # A local cluster unless an address is given; its log lines stay off this process's stderr.
            ray.init(
                address=address,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
                configure_logging=True,
            )
            self.started = True
        self._task = ray.remote(_call)
        self._actor = ray.remote(_Worker)

    def map(self, fn, items: Sequence, memory: Sequence[int] | None = None) -> Iterator:
        refs = [
            self._task.options(num_cpus=1, memory=int(memory[i]) if memory else None, max_retries=ATTEMPTS - 1).remote(
                fn, item
            )
            for i, item in enumerate(items)
        ]
        for ref in refs:
            yield _get(ref)

    def workers(self) -> tuple[int, dict]:
        """How many pool workers and what each asks for: one per GPU, else one per CPU."""
        res = ray.cluster_resources()
        gpus = int(res.get("GPU", 0))
        if gpus:
            return gpus, {"num_gpus": 1, "num_cpus": 1}
        return max(int(res.get("CPU", 1)), 1), {"num_cpus": 1}

    def pool(
        self, fn, items: Sequence, on_dispatch: Callable[[object, int], None] | None = None
    ) -> Iterator[tuple[int, object]]:
        if not items:
            return
        n, options = self.workers()
        idle = deque(self._actor.options(**options).remote() for _ in range(min(n, len(items))))
        queue = deque(range(len(items)))
        attempts = [0] * len(items)
        running: dict = {}  # ref -> (actor, index)
        done: set[int] = set()
        try:
            while queue or running:
                while queue and idle:
                    i = queue.popleft()
                    actor = idle.popleft()
                    attempts[i] += 1
                    running[actor.run.remote(fn, items[i])] = (actor, i)  # type: ignore[union-attr]  # a Ray actor
                    if on_dispatch is not None:
                        on_dispatch(actor, i)
                ready, _ = ray.wait(list(running), num_returns=1)
                actor, i = running.pop(ready[0])
                try:
                    result = _get(ready[0])
                except LOST:
                    # Lost with its item: the item goes back to the queue for another worker; a fresh
                    # worker takes the lost one's place when no other is left.
                    if attempts[i] >= ATTEMPTS:
                        raise
                    queue.appendleft(i)
                    if not idle and not running:
                        idle.append(self._actor.options(**options).remote())
                    continue
                idle.append(actor)
                if i in done:  # pragma: no cover - each item is dispatched again only after a loss
                    continue
                done.add(i)
                yield i, result
        finally:
            for ref in running:
                ray.cancel(ref, force=True)
            for actor in [a for a, _ in running.values()] + list(idle):
                ray.kill(actor)

    def close(self) -> None:
        if self.started:
            ray.shutdown()
            self.started = False


def _get(ref):
    """A task's result; an exception raised in it is raised here as itself."""
    try:
        return ray.get(ref)
    except RayTaskError as e:
        cause = e.as_instanceof_cause()
        if isinstance(cause, LOST):
            raise
        inner = getattr(e, "cause", None)
        raise (inner if isinstance(inner, BaseException) else cause) from None
