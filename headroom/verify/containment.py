"""Freezing and containing a verify child: stopped between requests, and nothing it started left running.

Between requests a child is *frozen* (SIGSTOP, with every descendant): it cannot run while the
harness compares its outputs, writes the next inputs or times another process. Containment: the
child starts its own session; the harness is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so a
grandchild that calls ``setsid()`` and loses its parent is re-parented to the harness, where
``kill`` finds it; ``kill`` stops every descendant before killing any (a stopped process cannot
fork), then kills them all. Where the child has a cgroup (``sandbox``), freezing, counting and
killing go by it: every process it started, whoever the parent.
"""

from __future__ import annotations

import signal
from typing import Any

from headroom.verify.fork_server import LIVE, _helpers, fork_server_strays
from headroom.verify.procfs import descendants, own_children, reap, send_signal, started_after, stop_tree
from headroom.verify.sandbox import Sandbox


class Containment:
    """The freezing and containment half of ``process.Child`` (which starts the process and holds this state)."""

    sandbox: Sandbox
    proc: Any
    pid: int
    frozen: list[int]
    known_children: set[int]
    started: float

    def thaw(self) -> None:
        self.sandbox.thaw()  # whatever froze it: a cgroup left frozen would never answer
        if self.frozen:
            send_signal(self.frozen, signal.SIGCONT)
            self.frozen = []

    def freeze(self) -> None:
        """Stop the child, its descendants and any orphan it left (re-parented to the harness).

        With a cgroup freezer, the whole cgroup: every process the child started, whoever its
        parent; otherwise SIGSTOP to the tree /proc shows."""
        if self.proc.is_alive():
            if self.sandbox.freeze():
                self.frozen = [self.pid]
                return
            self.frozen = stop_tree(self.pid)
            for p in self._orphans():
                self.frozen.extend(stop_tree(p))

    def _orphans(self) -> list[int]:
        others = {c.pid for c in list(LIVE) if getattr(c, "pid", None)}  # other children (spawn start method)
        return [
            p
            for p in own_children() - self.known_children - _helpers() - others
            if p != self.pid and started_after(p, self.started)
        ]

    def stray_processes(self) -> list[int]:
        """Processes the child started that are still running (descendants, re-parented orphans, members
        of its cgroup, and processes of the fork server that no child of the harness is)."""
        return sorted(
            (
                set(descendants(self.pid))
                | set(self._orphans())
                | set(self.sandbox.members())
                | set(self._server_strays())
            )
            - {self.pid}
        )

    def _server_strays(self) -> list[int]:
        return [p for p in fork_server_strays() if started_after(p, self.started)]

    def kill(self) -> None:
        """Stop the child and everything it started, then kill them all."""
        victims: list[int] = self.sandbox.kill()
        for root in [self.pid, *self._orphans(), *self._server_strays()]:
            victims.extend(stop_tree(root))
        send_signal(victims, signal.SIGKILL)
        send_signal(victims, signal.SIGCONT)
        try:
            self.proc.join(5)
        except Exception:  # pragma: no cover
            pass
        reap(victims)
        self.frozen = []
