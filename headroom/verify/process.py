"""Child processes: start, strict request/reply, freeze, read memory, contain, kill.

A child is forked from a fork server that has imported torch (not CUDA), so
it starts in tens of milliseconds with a fresh CUDA context. The harness
talks to it only through ``request``: one command, exactly one reply of the
expected type and sequence number (``protocol.EXPECTED_REPLY``). A message the
harness did not ask for — found waiting before a command is sent, or after
``Bye`` — or a reply of the wrong type is ``Tampering`` (verdict ``fail``); a
crash, a hang or an exception in the child is ``ChildFailed`` (verdict
``error``).

Between requests a child is *frozen*, and whatever it started is found and killed
(``containment``). The child's stdout and stderr are a log file; ``RLIMIT_FSIZE`` caps every file
it writes; it inherits no other descriptor of the harness.

Where the machine allows, each child is also sealed (``sandbox``): freezing, counting and killing
go by its cgroup (every process it started, whoever the parent), and a candidate runs as an
unprivileged uid in its own mount and network namespace.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import multiprocessing.util  # noqa: F401  (its exit handler joins children: ours must run first, so registers later)
import os
import time
from typing import Any

import msgspec

from headroom.verify import protocol as P
from headroom.verify.containment import Containment
from headroom.verify.fork_server import (  # noqa: F401
    FORK_SERVER_LOST,
    LIVE,
    _end_retired,
    _helpers,
    _running,
    become_subreaper,
    fork_server_ok,
    fork_server_strays,
    replace_fork_server,
)
from headroom.verify.procfs import own_children, signal_name
from headroom.verify.sandbox import Sandbox, keep_fd


class ChildFailed(Exception):
    """The child could not do what was asked (crash, hang, exception): verdict ``error``."""

    def __init__(self, reason: str, log_tail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.log_tail = log_tail


class Tampering(Exception):
    """The child broke the protocol or hid from the harness: verdict ``fail``."""


_CTX: Any = None
_LIVE = LIVE


@atexit.register
def _kill_all() -> None:
    """No child outlives the harness (a frozen child would wait forever)."""
    for c in list(_LIVE):
        try:
            c.close()
        except Exception:
            pass
    _end_retired()


def _context() -> Any:
    global _CTX
    if _CTX is None:
        ctx = mp.get_context("forkserver")
        try:
            ctx.set_forkserver_preload(["headroom.verify.child"])
        except Exception:  # pragma: no cover - older Pythons
            pass
        _CTX = ctx
    if _CTX.get_start_method() == "forkserver":  # started before any child, so never taken for a stray
        from multiprocessing import forkserver

        if not fork_server_ok():
            replace_fork_server("it stopped listening on its socket")
        forkserver.ensure_running()
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    return _CTX


# --- the child ------------------------------------------------------------------------------


def _child_entry(conn: Any, job: bytes) -> None:
    from headroom.verify.child import main

    keep_fd(conn.fileno())  # the sandbox closes every other inherited descriptor (child._isolate)
    main(conn, job)


def _start_without_main(proc: Any) -> None:
    """Start a child without re-running the caller's ``__main__`` in it (the entry point is importable)."""
    from multiprocessing import spawn

    orig = spawn.get_preparation_data

    def prep(name: str) -> dict:
        d = orig(name)
        d.pop("init_main_from_path", None)
        d.pop("init_main_from_name", None)
        return d

    spawn.get_preparation_data = prep
    try:
        proc.start()
    finally:
        spawn.get_preparation_data = orig


class Child(Containment):
    """One child process; a candidate's ``timeout`` counts only the time it works on requests."""

    def __init__(self, job: P.Job, timeout: float):
        become_subreaper()
        # sealing (cgroup, namespaces, uid, private copies): headroom/verify/sandbox.py
        self.sandbox, job = Sandbox.for_job(job, os.path.basename(job.log_path))
        self.run_cpu_ns = self.run_wall_ns = self.run_forwards = 0  # timed phases, by cgroup accounting
        self.last_cpu_ns: int | None = None  # the last timed Run's CPU time (cgroup), None where not accounted
        self.job = job
        self.timeout = timeout
        self.used = 0.0
        self.seq = 0
        self.stage = "start-up"
        self.frozen: list[int] = []
        _context()
        self.known_children = own_children() | _helpers()
        self.started = time.monotonic()
        self._mem_fd: int | None = None
        self.ring_generation = 0  # the input ring this child has mapped (shared.Ring.generation)
        self.shared_outputs: list = []  # CUDA IPC shares of the last reply (settle_outputs)
        self.holds_outputs = False  # the last reply left outputs in the child (a Release poisons and frees them)
        self.opened: dict = {}  # the harness's mappings of them, by share
        self.segments: Any = None  # gate.SegmentMaps: its timed outputs' allocations, mapped once
        _LIVE.add(self)
        try:
            self.ready = self._start()
        except BaseException:  # a child that failed to start leaves no process, cgroup or private copy
            try:
                self.close()
            except Exception:
                pass
            raise

    # life cycle

    def _start(self) -> P.Ready:
        global _CTX
        for attempt in range(2):
            ctx = _context()
            self.conn, theirs = ctx.Pipe(duplex=True)
            self.proc = ctx.Process(target=_child_entry, args=(theirs, P.encode(self.job)), daemon=False)
            try:
                _start_without_main(self.proc)
            except (ConnectionError, FileNotFoundError, EOFError) as e:
                theirs.close()
                self.conn.close()
                if attempt or ctx.get_start_method() != "forkserver":
                    raise
                replace_fork_server(f"a request to it failed: {type(e).__name__}: {e}")
                continue
            theirs.close()
            self.pid = self.proc.pid
            self.sandbox.started(self.pid)
            reply = self._recv(P.Ready, 0, start=True)
            if isinstance(reply, P.Failed) and reply.kind == "bad_fork" and attempt == 0:
                self.kill()  # CUDA got initialised in the fork server: fall back to spawn
                _CTX = mp.get_context("spawn")
                continue
            if isinstance(reply, P.Failed):
                self._failed(reply)
            self.sandbox.verify(self.pid)
            self.freeze()
            return reply
        raise ChildFailed("the child could not start")  # pragma: no cover

    def _failed(self, f: P.Failed) -> None:
        self.thaw()  # let it finish exiting
        self.proc.join(5)
        raise ChildFailed(f"{f.message} (during {f.stage})", self.log_tail())

    def request(
        self,
        cmd: Any,
        stage: str | None = None,
        timeout: float | None = None,
        freeze: bool = True,
        first_wait: float | None = None,
        on_slow: Any = None,
        ring: Any = None,
    ) -> Any:
        """Send one command, return its reply (the child is thawed for it and frozen again after).

        ``first_wait`` / ``on_slow``: if no reply came within ``first_wait`` seconds, ``on_slow()`` runs
        once (a gated phase opens its gate: the child waits on the GPU) and the wait goes on. ``ring``:
        the ring a ``MapRing`` names (its memfd goes after the command)."""
        self.seq += 1
        cmd = msgspec.structs.replace(cmd, seq=self.seq)
        self.stage = stage or type(cmd).__name__.lower()
        self.check_quiet()
        self.settle_outputs()
        timed = isinstance(cmd, P.Run) and not cmd.null
        cpu0 = self.sandbox.cpu_ns() if timed else None
        self.thaw()
        t0 = time.monotonic()
        try:
            self._send(cmd)
            if isinstance(cmd, P.MapRing) and cmd.ring.memfd:
                self._send_ring(ring)
            if first_wait is not None and on_slow is not None:
                try:
                    early = self.conn.poll(first_wait)
                except (OSError, EOFError):
                    early = True
                if not early:
                    on_slow()
            reply = self._recv(P.EXPECTED_REPLY[type(cmd)], self.seq, timeout=timeout)
        finally:
            self.used += time.monotonic() - t0
        if isinstance(reply, P.Failed):
            self._failed(reply)
        if freeze:
            self.freeze()
        if cpu0 is not None:
            cpu1 = self.sandbox.cpu_ns()
            if cpu1 is not None:
                self.last_cpu_ns = cpu1 - cpu0
                self.run_cpu_ns += cpu1 - cpu0
                self.run_wall_ns += int((time.monotonic() - t0) * 1e9)
                self.run_forwards += len(cmd.batches)
        if isinstance(cmd, P.Run) and cmd.null and any(bool(row) for row in reply.outputs):
            raise Tampering(
                f"the child answered a null phase (no forwards asked) with outputs during {self.stage}: a forged reply"
            )
        self._note_reply(reply)
        # whether the child holds outputs is the harness's own record of what it asked for, never the reply's
        # say: a forged reply cannot buy an untimed command (a Release) before a timed phase
        self.holds_outputs = isinstance(cmd, (P.Trial, P.Capture)) or (isinstance(cmd, P.Run) and not cmd.null)
        return reply

    def _note_reply(self, reply: Any) -> None:
        """Map the allocations a reply shares for the first time; remember its torch IPC shares."""
        segs = getattr(reply, "segments", None)
        if segs:
            from headroom.verify.gate import SegmentMaps

            if self.segments is None:
                import torch

                self.segments = SegmentMaps(torch.device(self.job.device))
            try:
                self.segments.add(segs)
            except Exception as e:
                raise Tampering(f"the child shared an allocation the harness cannot map ({e})") from None
        outs = getattr(reply, "outputs", None)
        if outs:
            rows = outs if isinstance(reply, P.RunDone) else [outs]
            self.shared_outputs = [o for row in rows for o in row if isinstance(o, P.IpcTensor)]

    def open_output(self, out: P.IpcTensor) -> Any:
        """The child's output mapped (CUDA IPC), at most once per share between two commands.

        torch counts one release per share: the first mapping's release happens when it is freed;
        a second mapping of the same share would release it twice and strand the block in the
        child's IPC limbo (see ``settle_outputs``)."""
        from headroom.verify import shared

        key = (out.ref_counter_handle, out.ref_counter_offset)
        t = self.opened.get(key)
        if t is None:
            t = self.opened[key] = shared.open_ipc(out)
        return t

    def settle_outputs(self) -> None:
        """Before the next command: release every share of the last reply the harness never mapped.

        A producer keeps a shared CUDA block until each consumer has released it; outputs the
        harness did not sample were never mapped, so nothing released them and the child's memory
        grew with every phase (82 GiB of 1 GiB outputs on the H200). The harness's mappings are
        dropped here too; the child frees the blocks at its next command (``ipc_collect``).
        Called outside the timed part of a phase."""
        if not self.shared_outputs and not self.opened:
            return
        import torch

        keys = {(o.ref_counter_handle, o.ref_counter_offset): o for o in self.shared_outputs}
        for key, o in keys.items():
            if key not in self.opened:
                try:
                    torch.UntypedStorage._release_ipc_counter_cuda(o.ref_counter_handle, o.ref_counter_offset)
                except Exception:  # a malformed share is the child's own loss, not the harness's
                    pass
        self.opened.clear()
        self.shared_outputs = []

    def check_quiet(self) -> None:
        """Nothing may be waiting in the pipe before a command: an unrequested message is tampering."""
        try:
            pending = self.conn.poll(0)
        except (OSError, EOFError):
            pending = False
        if pending:
            try:
                raw = self.conn.recv_bytes(P.MAX_MESSAGE_BYTES)
                what = type(P.decode_reply(raw)).__name__
            except Exception:
                what = "a malformed frame"
            raise Tampering(f"the child sent {what} that the harness did not ask for (during {self.stage})")

    def _send(self, cmd: Any) -> None:
        try:
            self.conn.send_bytes(P.encode(cmd))
        except (OSError, BrokenPipeError, ValueError):
            self.proc.join(5)
            raise ChildFailed(
                f"the child process {signal_name(self.proc.exitcode)} before {self.stage}", self.log_tail()
            ) from None

    def _send_ring(self, ring: Any) -> None:
        from headroom.verify import ring as input_ring

        try:
            input_ring.send_ring(self.conn, ring, self.pid)
        except (OSError, ValueError, AttributeError, TypeError):
            self.proc.join(5)
            raise ChildFailed(
                f"the child process {signal_name(self.proc.exitcode)} before {self.stage}", self.log_tail()
            ) from None

    def _recv(self, expected: type, seq: int, timeout: float | None = None, start: bool = False) -> Any:
        limit = self.timeout - self.used if timeout is None else timeout
        if not start and limit <= 0:
            self.kill()
            raise ChildFailed(f"timed out after {self.timeout:.0f} s (during {self.stage})", self.log_tail())
        try:
            ready = self.conn.poll(max(limit, 0.0) if not start else self.timeout)
        except (OSError, EOFError):
            ready = True
        if not ready:
            self.kill()
            raise ChildFailed(f"timed out after {self.timeout:.0f} s (during {self.stage})", self.log_tail())
        try:
            raw = self.conn.recv_bytes(P.MAX_MESSAGE_BYTES)
        except (EOFError, OSError, ConnectionError):
            self.proc.join(5)
            raise ChildFailed(
                f"the child process {signal_name(self.proc.exitcode)} during {self.stage}", self.log_tail()
            ) from None
        try:
            reply = P.decode_reply(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise Tampering(f"malformed message from the child during {self.stage}: {e}") from None
        if isinstance(reply, P.Failed) and reply.seq == seq:
            return reply
        if type(reply) is not expected or reply.seq != seq:
            raise Tampering(
                f"the child sent {type(reply).__name__} (seq {reply.seq}) where the harness waited "
                f"for {expected.__name__} (seq {seq}) during {self.stage}: a forged or "
                f"out-of-order message"
            )
        return reply

    def goodbye(self) -> str | None:
        """Ask the child to exit; it must answer ``Done`` and then close the pipe. Returns a tampering reason."""
        if not self.proc.is_alive():
            return None
        try:
            self.request(P.Bye(seq=0), stage="shutdown", timeout=10)
        except Tampering as e:
            return str(e)
        except ChildFailed:
            return None
        self.thaw()
        try:
            if self.conn.poll(5):
                self.conn.recv_bytes(P.MAX_MESSAGE_BYTES)
                return "the child sent a message after saying goodbye"
        except (EOFError, OSError):
            pass
        self.proc.join(5)
        return None

    def close(self) -> None:
        """Kill what is left of the child and release its pipe."""
        try:
            self.kill()
        finally:
            if self.segments is not None:
                self.segments.close()
                self.segments = None
            self.sandbox.close()
            if self._mem_fd is not None:
                os.close(self._mem_fd)
                self._mem_fd = None
            try:
                self.conn.close()
            except OSError:
                pass

    def log_tail(self, n: int = 1500) -> str:
        try:
            with open(self.job.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    # reading the child's memory (CPU outputs)

    def read_memory(self, addr: int, nbytes: int) -> bytes:
        """Bytes at ``addr`` in the child (``/proc/<pid>/mem``): what is really there, not what it says."""
        if self._mem_fd is None:
            try:
                self._mem_fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY)
            except OSError as e:
                raise Tampering(
                    f"the harness cannot read the child's memory ({e.strerror}): the candidate "
                    f"made its process unreadable"
                ) from None
        try:
            data = os.pread(self._mem_fd, nbytes, addr)
        except OSError as e:
            raise Tampering(f"the child named an output at 0x{addr:x} that is not readable ({e.strerror})") from None
        if len(data) != nbytes:
            raise Tampering(
                f"the child named an output at 0x{addr:x} of which only {len(data)} of {nbytes} bytes are mapped"
            )
        return data


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""
