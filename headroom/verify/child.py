"""The child process: runs one model (the reference or a candidate), only when told.

Candidates are untrusted code and only ever run here. The child holds no
seed, no trial plan and no future input: it builds the model, says
``Ready``, and then answers one command at a time (``protocol``): inputs are
views of the harness's shared ring, written just before the command; outputs
stay in this process's memory until ``Release`` and are described (address or
CUDA IPC handle) for the harness to read itself. Its own timings are sent
only as a cross-check of the harness's clock.

Set-up: its own session (``setsid``), stdin from /dev/null, stdout/stderr to
a log file (``RLIMIT_FSIZE`` caps any one file at 2 GiB), torch's compile workers in-process.
"""

from __future__ import annotations

import builtins
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.multiprocessing  # noqa: F401  (CUDA IPC support)

try:  # imported up front: importing it later rebinds torch.manual_seed, which the integrity check watches
    import torch._dynamo  # noqa: F401
except Exception:  # pragma: no cover
    pass

from headroom.verify import gate, integrity, launches, shared
from headroom.verify import problem as prob
from headroom.verify import protocol as P
from headroom.verify import ring as input_ring
from headroom.verify.child_capture import capture_call
from headroom.verify.child_memory import _memory
from headroom.verify.child_state import _TF32_KEYS, StateMismatch, _Calls, torch_state  # noqa: F401  (re-exported)
from headroom.verify.precision import set_tf32

_type = builtins.type


class CandidateError(Exception):
    pass


class BadFork(Exception):
    pass


def _isolate(job: P.Job) -> None:
    from headroom.verify import sandbox

    sandbox.enter(job)  # its cgroup and namespaces, while still privileged (sandbox.py)
    try:
        os.setsid()
    except OSError:
        pass
    try:  # die with the fork server (which dies with the harness), even while frozen
        import ctypes

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    fd = os.open(job.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails instead of killing the child
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (job.file_cap_bytes, job.file_cap_bytes))
    except (ValueError, OSError):
        pass
    sandbox.lock(job)  # private files, no inherited descriptor, an unprivileged uid: last, before any import


def main(conn: Any, job_bytes: bytes) -> None:
    """Process entry point (preloaded in the fork server)."""
    job = P.decode_job(job_bytes)
    _isolate(job)
    state: dict[str, Any] = {"seq": 0, "stage": "start"}
    try:
        _serve(conn, job, state)
    except BaseException as e:  # noqa: BLE001 - SystemExit from a candidate is an error like any other
        kind = (
            "bad_fork"
            if isinstance(e, BadFork)
            else ("candidate" if job.role != "reference" and not isinstance(e, StateMismatch) else "harness")
        )
        msg = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        if isinstance(e, SystemExit):
            msg = f"called sys.exit({e.code!r})"
        tb = traceback.format_exc(limit=12)
        try:
            print(tb, file=sys.stderr)
            conn.send_bytes(
                P.encode(
                    P.Failed(
                        seq=state["seq"],
                        stage=state["stage"],
                        kind=kind,
                        message=msg[:2000],
                        traceback=tb[-4000:],
                    )
                )
            )
        except Exception:
            pass
    finally:
        mod = sys.modules.get("torch._inductor.async_compile")
        if mod is not None:
            try:
                mod.shutdown_compile_workers()
            except Exception:
                pass
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(0)


class _Prims:
    """Clocks and events captured before any candidate code runs (for the cross-check only)."""

    def __init__(self, device: Any):
        self.cuda = device.type == "cuda"
        self.perf = time.perf_counter
        self.pending: Any = None  # the events of the last gated phase
        self.ipc_dirty = False  # outputs were shared by torch's IPC since the last collect
        if self.cuda:
            torch.cuda.init()
            base = torch._C._CudaEventBase
            self.sync = torch._C._cuda_synchronize
            self.record, self.elapsed = base.record, base.elapsed_time
            self.stream = torch.cuda.current_stream()
            self.events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]

    def stream_sync(self) -> None:
        """Wait for the harness's stream only: work a candidate left on a side stream shows as unwritten."""
        if self.cuda:
            ev = self.events[0]
            self.record(ev, self.stream)
            ev.synchronize()


def _start_device(job: P.Job) -> tuple[Any, _Prims, Any, str | None]:
    """Threads, in-process compilation, the device and (GPU) the gated clock, before any problem code."""
    os.environ.update(job.env)
    device = torch.device(job.device)
    if job.threads:
        torch.set_num_threads(int(job.threads))
    try:  # torch.compile in-process: a worker pool would outlive os._exit
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1
    except Exception:  # pragma: no cover
        pass
    if device.type == "cuda":
        if torch.cuda._is_in_bad_fork():
            raise BadFork("CUDA was initialised in the fork server; the harness retries with spawn")
        torch.cuda.set_device(device)
    prims = _Prims(device)
    clock, clock_error = None, None
    if prims.cuda and job.clock_path:
        try:  # before the candidate is imported: the page and the driver's entry points are ours
            clock = gate.StreamClock(job.clock_path, job.clock_slot, device)
        except Exception as e:  # no stream memory operations here: phases run ungated
            clock_error = f"{type(e).__name__}: {e}"[:300]
    return device, prims, clock, clock_error


def _serve(conn: Any, job: P.Job, state: dict) -> None:
    """Start (``_ready``), then answer one command at a time, each by its handler, until ``Bye``."""
    # taken before any problem or candidate code runs: a handler replaced later is never called
    # (and the integrity snapshot reports it replaced)
    handlers: dict[type, Callable[[_Served, Any, Any], Any]] = {
        P.MapRing: _on_map_ring,
        P.Memory: _on_memory,
        P.Launches: _on_launches,
        P.Trial: _on_trial,
        P.Run: _on_run,
        P.Compile: _on_compile,
        P.Capture: _on_capture,
        P.Release: _on_release,
    }
    s = _ready(conn, job, state)
    while True:
        raw = conn.recv_bytes(P.MAX_MESSAGE_BYTES)
        cmd = P.decode_command(raw)
        state["seq"] = cmd.seq
        state["stage"] = type(cmd).__name__.lower()
        handler = handlers.get(type(cmd))
        if handler is None:  # Bye
            conn.send_bytes(P.encode(P.Done(seq=cmd.seq, violations=integrity.violations(s.snap))))
            return
        conn.send_bytes(P.encode(handler(s, cmd, conn)))


class _Served:
    """What the child keeps between commands: its model and clocks, the ring it mapped, the outputs it holds."""

    def __init__(self, model: Any, device: Any, prims: _Prims, clock: Any, segments: Any, snap: dict):
        self.model, self.device, self.prims, self.clock = model, device, prims, clock
        self.segments = segments  # gate.Segments: timed outputs shared by allocation (GPU)
        self.snap = snap  # integrity.snapshot(), taken before the candidate was imported
        self.ring: Any = None
        self.kept: list = []
        self.compiled: Any = None
        self.calls = _Calls()
        self.mode = "ipc" if prims.cuda else "addr"


def _ready(conn: Any, job: P.Job, state: dict) -> _Served:
    """The device, the problem and the model (a candidate's file imported first), then ``Ready``."""
    device, prims, clock, clock_error = _start_device(job)
    segments = gate.Segments() if prims.cuda else None
    precision = set_tf32(True)
    problem = prob.load_problem(job.problem, overrides={k: v for k, v in job.overrides.items()})
    snap = integrity.snapshot()
    cls = problem.Model
    if job.role in ("candidate", "build"):
        state["stage"] = "import"
        mod = prob.import_file(job.candidate, "candidate")  # type: ignore[arg-type]
        cls = getattr(mod, "ModelNew", None)
        if cls is None:
            raise CandidateError(f"{job.candidate} does not define class ModelNew")
    state["stage"] = "init"
    model = prob.build_model(cls, problem, job.init_seed, device) if job.role != "build" else None
    conn.send_bytes(
        P.encode(
            P.Ready(
                seq=0,
                device_name=torch.cuda.get_device_name(device) if prims.cuda else "cpu",
                torch=str(torch.__version__),
                precision=precision,
                violations=integrity.violations(snap),
                gated=clock is not None,
                clock_error=clock_error,
            )
        )
    )
    return _Served(model, device, prims, clock, segments, snap)


def _args(s: _Served, a: list) -> list:
    """A command's arguments: views of the ring, or the scalars themselves."""
    return [shared.view(s.ring, x) if isinstance(x, P.RingTensor) else x.value for x in a]


def _release(s: _Served) -> None:
    s.kept = _released(s.prims, s.kept, s.model, s.ring)


# --- one handler per command (``_serve``): each returns its reply -----------------------------


def _on_map_ring(s: _Served, cmd: P.MapRing, conn: Any) -> P.Done:
    s.ring = input_ring.map_ring(cmd.ring, s.device, conn)
    return P.Done(seq=cmd.seq, violations=integrity.violations(s.snap))


def _on_memory(s: _Served, cmd: P.Memory, conn: Any) -> P.MemoryDone:
    _release(s)
    peak, method, free = _memory(
        s.model, _args(s, cmd.args), s.prims, s.device, lambda o: _poison(o, s.model, s.ring, s.prims)
    )
    s.calls.outside()
    return P.MemoryDone(
        seq=cmd.seq, peak_bytes=peak, method=method, violations=integrity.violations(s.snap), free_bytes=free
    )


def _on_launches(s: _Served, cmd: P.Launches, conn: Any) -> P.LaunchesDone:
    _release(s)
    cp = launches.profile_call(s.model, _args(s, cmd.args), s.prims.cuda)
    s.calls.outside()
    return P.LaunchesDone(
        seq=cmd.seq,
        count=cp.launches,
        method=cp.method,
        kernel_us=cp.kernel_us,
        syncs=cp.syncs,
        d2h_bytes=cp.d2h_bytes,
        violations=integrity.violations(s.snap),
        top_kernels=list(cp.top_kernels),
    )


def _on_trial(s: _Served, cmd: P.Trial, conn: Any) -> P.TrialDone:
    _release(s)  # the previous command's outputs (the harness has read them)
    s.kept, unordered = _trial(s.model, _args(s, cmd.args), s.prims, s.calls)
    return P.TrialDone(
        seq=cmd.seq,
        outputs=[shared.describe(o, s.mode) for o in s.kept],
        violations=integrity.violations(s.snap),
        unordered_ms=unordered,
    )


def _on_run(s: _Served, cmd: P.Run, conn: Any) -> P.RunDone:
    _release(s)
    fn = s.compiled if cmd.compiled else s.model
    if cmd.token and s.clock is not None:
        s.kept, ms = _run_gated(fn, [_args(s, b) for b in cmd.batches], cmd, s.prims, s.clock, s.calls)
    else:
        s.kept, ms = _run(fn, [_args(s, b) for b in cmd.batches], cmd, s.prims, s.calls)
    outs = [[_describe_timed(o, s.segments, s.mode) for o in row] for row in s.kept]
    return P.RunDone(
        seq=cmd.seq,
        outputs=outs,
        child_ms=ms,
        violations=integrity.violations(s.snap),
        segments=s.segments.take_new() if s.segments is not None else [],
    )


def _on_compile(s: _Served, cmd: P.Compile, conn: Any) -> P.Done:
    s.compiled, err = _compile(s.model, _args(s, cmd.args), s.prims)
    s.calls.outside()
    return P.Done(seq=cmd.seq, violations=integrity.violations(s.snap), error=err)


def _on_capture(s: _Served, cmd: P.Capture, conn: Any) -> P.CaptureDone:
    _release(s)
    s.kept, err = (
        capture_call(s.model, _args(s, cmd.args), _args(s, cmd.replay), s.prims.sync)
        if s.prims.cuda
        else ([], "CUDA graphs need a GPU")
    )
    s.calls.outside()
    s.prims.ipc_dirty = s.prims.cuda
    return P.CaptureDone(
        seq=cmd.seq,
        outputs=[shared.describe(o, s.mode) for o in s.kept],
        violations=integrity.violations(s.snap),
        error=err,
    )


def _on_release(s: _Served, cmd: P.Release, conn: Any) -> P.Done:
    _release(s)
    return P.Done(seq=cmd.seq, violations=integrity.violations(s.snap))


def _trial(model: Any, xs: list, prims: _Prims, calls: _Calls) -> tuple[list, float]:
    """One trial's call: its outputs, and on a GPU how long work outside the caller's stream still ran (ms)."""
    with calls.call(True):  # the same state as a timed call (``_Calls``): nothing tells them apart
        out = model(*xs)
        calls.returned()
        prims.stream_sync()
        unordered = 0.0
        if prims.cuda:  # anything still running once the caller's stream is done?
            t0 = prims.perf()
            prims.sync()
            unordered = (prims.perf() - t0) * 1e3
    kept = prob.flatten_outputs(out)
    prims.ipc_dirty = prims.cuda
    return kept, unordered


def _compile(model: Any, xs: list, prims: _Prims) -> tuple[Any, str | None]:
    """``torch.compile`` of the reference and its first call (``--vs-compile``): (compiled or None, error)."""
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            compiled(*xs)
        torch.cuda.synchronize() if prims.cuda else None
    except Exception as e:
        return None, f"torch.compile: {type(e).__name__}: {e}"[:500]
    return compiled, None


def _describe_timed(o: Any, segments: Any, mode: str) -> P.Out:
    """A timed output: by segment on a GPU (mapped once by the harness), else as trials describe it."""
    if segments is not None and _type(o) is torch.Tensor and o.is_cuda and o.numel() > 0:
        return segments.describe(o)
    return shared.describe(o, mode)


def _run_gated(
    fn: Any, batches: list[list], cmd: P.Run, prims: _Prims, clock: gate.StreamClock, calls: _Calls
) -> tuple[list, list[float]]:
    """Enqueue a gated phase (``gate``): wait for the token, the forwards between two events, the flag.

    Returns the outputs (still being computed once the gate opens) and the events of the previous
    gated phase (finished: the harness waited for its flag before sending this command)."""
    prev = prims.pending
    ms: list[float] = []
    if prev is not None:
        try:
            ms = [float(prims.elapsed(prev[0], prev[1]))]
        except Exception:  # never recorded or not finished: the harness's clock decides anyway
            ms = []
    outs: list = []
    stream = prims.stream.cuda_stream
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with calls.call(cmd.tf32):
        clock.wait(stream, cmd.token)
        prims.record(a, prims.stream)
        for xs in batches:
            if not cmd.null:
                outs.append(prob.flatten_outputs(fn(*xs)))
        prims.record(b, prims.stream)
        clock.signal(stream, cmd.token)
        calls.returned()
    prims.pending = (a, b)
    return outs if not cmd.null else [[] for _ in batches], ms


def _released(prims: _Prims, kept: list, model: Any, ring: Any) -> list:
    """Poison, then drop, the previous command's outputs (the harness has read them); after a trial
    (outputs shared by torch's IPC) also free those the harness has closed. Timed outputs are shared
    by segment (``gate``): nothing to collect, so nothing in a phase."""
    if kept:
        _poison(kept, model, ring, prims)
    kept.clear()
    if prims.cuda and prims.ipc_dirty:
        torch.cuda.ipc_collect()
        prims.ipc_dirty = False
    return []


def _run(fn: Any, batches: list[list], cmd: P.Run, prims: _Prims, calls: _Calls) -> tuple[list, list[float]]:
    """One timed phase: a forward per input set, then a device-wide synchronise; outputs kept."""
    outs: list = []
    ms: list[float] = []
    with calls.call(cmd.tf32):
        if prims.cuda:  # one pair of events: a pair per forward would add launches to the phase
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            prims.record(a, prims.stream)
            for xs in batches:
                if not cmd.null:
                    outs.append(prob.flatten_outputs(fn(*xs)))
            prims.record(b, prims.stream)
            calls.returned()
            prims.sync()
            ms = [float(prims.elapsed(a, b))]
        else:
            for xs in batches:
                t0 = prims.perf()
                if not cmd.null:
                    outs.append(prob.flatten_outputs(fn(*xs)))
                ms.append((prims.perf() - t0) * 1e3)
            calls.returned()
    return outs if not cmd.null else [[] for _ in batches], ms


def _poison(outs: list, model: Any, ring: Any, prims: _Prims) -> None:
    """Fill the storage of every output the harness is done with with 0xFF bytes (NaN for floats, -1 for
    ints) before it is freed, whatever the command: the allocator hands such blocks to the next
    allocations, so an output left unwritten reads as NaN alike in a trial and in a timed phase.
    Never the ring (inputs the harness may have written for this command) or the model's own tensors."""
    keep = set()
    if isinstance(model, torch.nn.Module):
        keep = {t.untyped_storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    lo = hi = 0
    if ring is not None:
        lo = ring.data_ptr()
        hi = lo + ring.numel()
    seen: set[int] = set()
    stack = list(outs)
    while stack:
        o = stack.pop()
        if isinstance(o, (list, tuple)):
            stack.extend(o)
            continue
        if (
            _type(o) is not torch.Tensor
            or o.numel() == 0
            or o.layout != torch.strided
            or o.device.type not in ("cpu", "cuda")
        ):
            continue
        try:  # best effort: an output without a plain storage is left as it is
            st = o.untyped_storage()
            p, n = st.data_ptr(), st.nbytes()
            if p in seen or p in keep or (lo < p + n and p < hi):
                continue
            seen.add(p)
            torch.empty(0, dtype=torch.uint8, device=o.device).set_(st).fill_(0xFF)
        except (RuntimeError, TypeError, NotImplementedError):
            continue
    if prims.cuda and seen:
        prims.sync()  # done before the reply: nothing of it runs into the next clock
