"""The child process: runs one model (the reference or a candidate) for the harness.

Candidates are untrusted code. They only ever run here, in a process forked
from a clean server that has imported torch but not initialised CUDA, with:

- a time limit enforced by the parent (a hang is killed);
- stdout/stderr redirected to a log file the parent reads on error;
- the clocks and synchronisation objects captured before the candidate is
  imported (``timing.capture``), so patching them changes nothing;
- an integrity snapshot of timer, stream, event, memory, RNG and tensor
  functions (and of the harness's own modules): any replacement, and any
  torch function/dispatch mode left active, is reported and fails the verdict;
- outputs and post-call inputs sent to the parent as raw bytes or CUDA IPC
  handles (``wire``), where the comparison against the float64 truth happens.

Phases, in order: ``ready`` (model built) -> ``memory`` (peak memory of one
forward, after a warm-up, from a reset allocator) -> ``trial`` x N
(correctness, candidates only; uninitialised memory is NaN-poisoned) ->
``timing`` per phase -> ``done``.
"""

from __future__ import annotations

import builtins
import inspect
import os
import sys
import traceback
import warnings
from contextlib import contextmanager
from typing import Any

import torch
import torch.multiprocessing  # noqa: F401  (CUDA IPC support)

try:  # imported up front: importing it later rebinds torch.manual_seed, which the integrity check watches
    import torch._dynamo  # noqa: F401
except Exception:  # pragma: no cover
    pass

from headroom.verify import checks, inputs as inp, problem as prob, timing, wire
from headroom.verify.timing import precision_state, set_tf32

_type = builtins.type

WATCHED = (
    "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.monotonic_ns", "time.time",
    "time.time_ns", "time.process_time", "time.sleep",
    "builtins.type", "builtins.isinstance", "builtins.print",
    "torch.cuda.synchronize", "torch.cuda.current_stream", "torch.cuda.default_stream", "torch.cuda.set_stream",
    "torch.cuda.stream", "torch.cuda.Stream", "torch.cuda.Event",
    "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time", "torch.cuda.Event.synchronize",
    "torch.cuda.Event.query", "torch.cuda.Event.wait", "torch.cuda.Event.__new__",
    "torch.cuda.Stream.synchronize", "torch.cuda.Stream.wait_stream", "torch.cuda.Stream.record_event",
    "torch.cuda.max_memory_allocated", "torch.cuda.memory_allocated", "torch.cuda.reset_peak_memory_stats",
    "torch.cuda.memory_stats", "torch.cuda.empty_cache", "torch.cuda.mem_get_info",
    "torch._C._cuda_synchronize", "torch._C._cuda_getCurrentStream", "torch._C._cuda_memoryStats",
    "torch._C._cuda_resetPeakMemoryStats", "torch._C._CudaEventBase",
    "torch.manual_seed", "torch.random.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all",
    "torch.seed", "torch.Generator", "torch.randn", "torch.rand", "torch.randint", "torch.randperm",
    "torch.normal", "torch.empty", "torch.empty_like", "torch.zeros", "torch.ones", "torch.full", "torch.arange",
    "torch.pow", "torch.unique", "torch.equal", "torch.allclose", "torch.dot", "torch.linalg.vector_norm",
    "torch.isfinite", "torch.frombuffer", "torch.device",
    "torch.use_deterministic_algorithms", "torch.are_deterministic_algorithms_enabled",
    "torch.nn.Module.__call__", "torch.nn.Module._call_impl", "torch.nn.Module.to",
    "torch.Tensor.__torch_function__", "torch.Tensor.__torch_dispatch__",
    "torch.Tensor.clone", "torch.Tensor.copy_", "torch.Tensor.contiguous", "torch.Tensor.to", "torch.Tensor.cpu",
    "torch.Tensor.cuda", "torch.Tensor.float", "torch.Tensor.double", "torch.Tensor.view", "torch.Tensor.reshape",
    "torch.Tensor.sum", "torch.Tensor.numel", "torch.Tensor.data_ptr", "torch.Tensor.abs", "torch.Tensor.fill_",
    "torch.Tensor.__eq__", "torch.Tensor.storage_offset", "torch.Tensor.untyped_storage",
    "torch.Tensor._typed_storage", "torch.Tensor.numpy", "torch.Tensor.tolist", "torch.Tensor.item",
    "torch.Tensor.detach", "torch.Tensor.element_size", "torch.Tensor.mul_", "torch.Tensor.add_",
    "torch.Tensor.is_floating_point", "torch.Tensor.shape", "torch.Tensor.dtype",
    "multiprocessing.connection.Connection.send_bytes", "multiprocessing.connection.Connection.recv_bytes",
    "multiprocessing.connection.Connection.poll", "json.dumps", "json.loads", "os._exit",
)
_OWN_MODULES = ("headroom.verify.checks", "headroom.verify.inputs", "headroom.verify.problem",
                "headroom.verify.timing", "headroom.verify.wire", "headroom.verify.child")


def _resolve(dotted: str) -> Any:
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = inspect.getattr_static(obj, p)
        return obj
    raise AttributeError(dotted)


def snapshot() -> dict[str, Any]:
    """The objects behind every watched name (identity is compared later)."""
    snap: dict[str, Any] = {}
    for name in WATCHED:
        try:
            snap[name] = _resolve(name)
        except Exception:
            continue
    for modname in _OWN_MODULES:
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        for k, v in vars(mod).items():
            if callable(v) and not k.startswith("__"):
                snap[f"{modname}.{k}"] = v
    return snap


def integrity_violations(snap: dict[str, Any]) -> list[str]:
    """What the candidate replaced since ``snap`` (names), plus active torch modes."""
    bad = []
    for name, obj in snap.items():
        try:
            now = _resolve(name)
        except Exception:
            bad.append(f"{name} (deleted)")
            continue
        if now is not obj:
            bad.append(name)
    try:
        if torch._C._len_torch_function_stack() > 0:
            bad.append("a torch function mode is active (TorchFunctionMode left entered)")
    except AttributeError:  # pragma: no cover
        pass
    try:
        if torch._C._len_torch_dispatch_stack() > 0:
            bad.append("a torch dispatch mode is active (TorchDispatchMode left entered)")
    except AttributeError:  # pragma: no cover
        pass
    if sys.gettrace() is not None or sys.getprofile() is not None:
        bad.append("a sys.settrace/setprofile hook is installed")
    return bad


# --- memory -------------------------------------------------------------------------------


def _proc_status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_cpu_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def tensor_bytes(objs: Any) -> int:
    """Bytes of the distinct storages behind the tensors of modules / lists (parameters, buffers, attributes)."""
    seen: set = set()
    total = 0

    def add(t: Any) -> None:
        nonlocal total
        if isinstance(t, torch.Tensor):
            try:
                st = t.untyped_storage()
                key = (st.data_ptr(), t.device.type)
                if key not in seen:
                    seen.add(key)
                    total += st.nbytes()
            except Exception:
                total += t.numel() * t.element_size()

    def walk(o: Any, depth: int = 0) -> None:
        if depth > 3:
            return
        if isinstance(o, torch.nn.Module):
            for m in o.modules():
                for t in list(m.parameters(recurse=False)) + list(m.buffers(recurse=False)):
                    add(t)
                for v in vars(m).values():
                    if isinstance(v, torch.Tensor):
                        add(v)
                    elif isinstance(v, (list, tuple)):
                        for x in v:
                            add(x)
        elif isinstance(o, (list, tuple)):
            for x in o:
                walk(x, depth + 1)
        else:
            add(o)

    walk(objs)
    return total


def memory_phase(model: Any, problem: Any, job: dict, device: Any, prims: timing.Primitives) -> dict:
    """Peak memory of one forward (after a warm-up forward), parameters and inputs included."""
    seed = job["mem_seed"]
    xs = prob.published_inputs(problem, inp.mix(seed, "warmup"), device)
    with torch.no_grad():
        out = model(*xs)
    timing.sync(prims)
    del out, xs
    xs = prob.published_inputs(problem, seed, device)
    if prims.cuda:
        timing.sync(prims)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        with torch.no_grad():
            out = model(*xs)
        timing.sync(prims)
        peak = int(torch.cuda.max_memory_allocated(device))
        res = {"method": "torch.cuda.max_memory_allocated (reset before the forward)", "peak_bytes": peak}
    else:
        resident = tensor_bytes(model) + tensor_bytes(xs)
        before = _proc_status_kb("VmRSS")
        reset = _reset_cpu_peak()
        with torch.no_grad():
            out = model(*xs)
        hwm = _proc_status_kb("VmHWM") if reset else None
        if before is None or hwm is None:
            delta = 0
            method = "parameter and input bytes only (no /proc peak RSS)"
        else:
            delta = max(0, (hwm - before) * 1024)
            method = "VmHWM after /proc/self/clear_refs reset, plus parameter and input bytes"
        res = {"method": method, "peak_bytes": int(resident + delta), "forward_bytes": int(delta),
               "resident_bytes": int(resident)}
    del out, xs
    return res


# --- poisoning ----------------------------------------------------------------------------


def _poison_cuda_cache(device: Any, nbytes: int) -> None:
    """Leave NaN-patterned (0xFF) blocks in the caching allocator for the next allocations to reuse."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    free, _total = torch.cuda.mem_get_info(device)
    n = int(min(max(nbytes, 64 << 20), free * 0.5))
    big = torch.empty(n, dtype=torch.uint8, device=device)
    big.fill_(0xFF)
    small = [torch.empty(256 << 10, dtype=torch.uint8, device=device).fill_(0xFF) for _ in range(16)]
    torch.cuda.synchronize(device)
    del big, small


@contextmanager
def poisoned(device: Any, nbytes: int, cuda: bool):
    """Uninitialised memory reads as NaN (floats) / max-int (ints) inside the block."""
    import torch.utils.deterministic as det

    prev = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            det.fill_uninitialized_memory)
    if cuda:
        try:
            _poison_cuda_cache(device, nbytes)
        except Exception:  # best effort: the empty-constructor fill below still applies
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch._C._set_deterministic_algorithms(True, warn_only=True)
        det.fill_uninitialized_memory = True
        try:
            yield
        finally:
            torch._C._set_deterministic_algorithms(prev[0], warn_only=prev[1])
            det.fill_uninitialized_memory = prev[2]


# --- main ---------------------------------------------------------------------------------


class CandidateError(Exception):
    """The candidate failed in a way that is its own fault (reported as verdict error)."""


class BadFork(Exception):
    """This process was forked from one with CUDA initialised: it cannot use CUDA."""


def _send_outputs(conn: Any, header: dict, tensors: list, mode: str) -> list:
    blobs: list = []
    metas = [wire.encode_tensor(t, blobs, mode) for t in tensors]
    keep = [m.get("_keep") for m in metas]
    wire.send(conn, {**header, "tensors": [wire.public(m) for m in metas]}, blobs)
    return keep


def _stream_sync(prims: timing.Primitives) -> None:
    """Wait for the harness's stream only (not for side streams: their work must be ordered by the candidate)."""
    if prims.cuda:
        ev = prims.events[1]
        prims.ev_record(ev, prims.stream)
        prims.ev_sync(ev)


def main(conn: Any, job: dict) -> None:
    """Process entry point."""
    try:
        os.setpgrp()
    except OSError:
        pass
    log = job.get("log_path")
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    stage = ["start"]
    try:
        _run(conn, job, stage)
    except BaseException as e:  # noqa: BLE001 - SystemExit from a candidate is an error like any other
        kind = "candidate" if isinstance(e, CandidateError) or job["role"] == "candidate" else "harness"
        if isinstance(e, BadFork):
            kind = "bad_fork"
        tb = traceback.format_exc(limit=12)
        msg = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        if isinstance(e, SystemExit):
            msg = f"called sys.exit({e.code!r})"
        try:
            print(tb, file=sys.stderr)
            wire.send(conn, {"type": "error", "stage": stage[0], "kind": kind, "message": msg[:2000],
                             "traceback": tb[-4000:]})
        except Exception:
            pass
    finally:
        _shutdown_compile_workers()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(0)


def _shutdown_compile_workers() -> None:
    """Stop torch.compile's worker pool (if any) before os._exit, so it leaves no semaphores behind."""
    mod = sys.modules.get("torch._inductor.async_compile")
    if mod is not None:
        try:
            mod.shutdown_compile_workers()
        except Exception:
            pass


def _run(conn: Any, job: dict, stage: list) -> None:
    role = job["role"]
    os.environ.update(job.get("env") or {})
    device = torch.device(job["device"])
    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    stage[0] = "setup"
    try:  # torch.compile in-process: a worker pool would outlive os._exit (and leak its semaphores)
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1
    except Exception:  # pragma: no cover
        pass
    if device.type == "cuda":
        if torch.cuda._is_in_bad_fork():
            raise BadFork("CUDA was initialised in the fork server; the harness retries with spawn")
        torch.cuda.set_device(device)
    prims = timing.capture(device)
    precision = set_tf32(True)
    problem = prob.load_problem(job["problem"])
    snap = snapshot()
    cls = problem.Model
    if role == "candidate":
        stage[0] = "import"
        mod = prob.import_file(job["candidate"], "candidate")
        cls = getattr(mod, "ModelNew", None)
        if cls is None:
            raise CandidateError(f"{job['candidate']} does not define class ModelNew")
    stage[0] = "init"
    model = prob.build_model(cls, problem, job["init_seed"], device)
    violations = integrity_violations(snap)
    wire.send(conn, {"type": "ready", "precision": precision, "violations": violations,
                     "device_name": torch.cuda.get_device_name(device) if prims.cuda else "cpu",
                     "torch": torch.__version__})

    stage[0] = "memory"
    mem = memory_phase(model, problem, job, device, prims)
    wire.send(conn, {"type": "memory", **mem, "violations": integrity_violations(snap)})

    trials = [inp.TrialSpec.from_dict(d) for d in job.get("trials", [])]
    if trials:
        mode = "ipc" if prims.cuda and job.get("transport", "ipc") == "ipc" else "bytes"
        prev = None
        for spec in trials:
            stage[0] = f"trial {spec.index} ({spec.label})"
            xs = inp.make_trial_inputs(problem, spec, device, prev)  # exactly as the harness makes them
            pre = [checks.digest(x) if isinstance(x, torch.Tensor) else None for x in xs]
            with poisoned(device, int(job.get("poison_bytes", 0)), prims.cuda):
                with torch.no_grad():
                    out = model(*xs)
                _stream_sync(prims)
            outs = prob.flatten_outputs(out)
            types = [f"{_type(o).__module__}.{_type(o).__qualname__}" for o in outs]
            plain = [_type(o) is torch.Tensor for o in outs]
            tensors = [o for o, ok in zip(outs, plain) if ok]
            in_tensors = [x for x in xs if isinstance(x, torch.Tensor)]
            header = {"type": "trial", "index": spec.index, "output_types": types, "plain": plain,
                      "input_digests": pre, "violations": integrity_violations(snap), "n_out": len(tensors)}
            keep = _send_outputs(conn, header, tensors + in_tensors, mode)
            reply, _ = wire.recv(conn)
            if reply.get("type") == "resend":
                mode = "bytes"
                keep += _send_outputs(conn, header, tensors + in_tensors, mode)
                reply, _ = wire.recv(conn)
            del keep, out, outs, tensors, in_tensors
            prev = xs
        del prev
        reply, _ = wire.recv(conn)
        if reply.get("type") != "proceed":
            wire.send(conn, {"type": "done", "violations": integrity_violations(snap)})
            return

    flush_buf = torch.empty(timing.flush_bytes(device) // 4, dtype=torch.float32, device=device)
    secret = job["timing_seed"]
    for phase in job.get("phases", []):
        stage[0] = f"timing ({phase})"
        fn = model
        if phase == "fp32":
            set_tf32(False)
        else:
            set_tf32(True)
        if phase == "compile":
            try:
                fn = torch.compile(model)
            except Exception as e:
                wire.send(conn, {"type": "timing", "phase": phase, "error": f"torch.compile: {e}"[:500]})
                continue
        fps: list = []
        weights: dict[int, tuple] = {}
        want_fp = phase in ("tf32",)

        def on_output(k: int, out: Any) -> None:
            outs = prob.flatten_outputs(out)
            row = []
            for j, o in enumerate(outs):
                if _type(o) is not torch.Tensor:
                    row.append({"type": f"{_type(o).__qualname__}"})
                    continue
                key = (j, o.numel())  # jagged outputs change size with the inputs
                if weights.get(j, (None,))[0] != key:
                    weights[j] = (key, checks.projection_weights(o.numel(), inp.mix(job["fp_seed"], *key), device))
                row.append(checks.fingerprint(o, weights[j][1]))
            fps.append(row)

        def make(k: int) -> list:
            return prob.published_inputs(problem, inp.timing_seed(secret, k), device)

        def run(xs: list) -> Any:
            with torch.no_grad():
                return fn(*xs)

        phase_precision = precision_state()
        wire.send(conn, {"type": "timing_start", "phase": phase})
        try:
            res = timing.time_phase(run, make, int(job["warmup"]), int(job["iters"]), prims, flush_buf,
                                    on_output if want_fp else None)
        except Exception as e:
            if phase == "compile" or (role == "reference" and phase != "tf32"):
                wire.send(conn, {"type": "timing", "phase": phase, "error": f"{type(e).__name__}: {e}"[:500]})
                continue
            raise
        finally:
            set_tf32(True)
        res["fingerprints"] = fps if want_fp else None
        wire.send(conn, {"type": "timing", "phase": phase, **res, "precision": phase_precision,
                         "violations": integrity_violations(snap)})
    extra: dict = {}
    if role == "reference" and job.get("bandwidth"):
        stage[0] = "bandwidth"
        del flush_buf
        bw, src = timing.peak_bandwidth(device, prims)
        extra = {"peak_bandwidth": bw, "peak_bandwidth_source": src}
        xs = prob.published_inputs(problem, inp.timing_seed(secret, 0), device)
        with torch.no_grad():
            out = model(*xs)
        extra["io_bytes"] = int(sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))
                                + sum(o.numel() * o.element_size() for o in prob.flatten_outputs(out)
                                      if isinstance(o, torch.Tensor)))
    wire.send(conn, {"type": "done", "violations": integrity_violations(snap), **extra})
