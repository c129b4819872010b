"""What verify's gated clock adds to a memory-bound kernel: the gate's wake-up and the inputs' memory state.

On the H200 the gated clock timed the fused LlamaRMSNorm (llama-7b prefill, 4x2048x4096 bf16) at
37.4 us per forward where its child's CUDA events read 36.1 us, verify's profile 33.7 us and the model's
trace 32.9 us. This probe separates the candidates for the difference, in one child process that
maps a ring of inputs from its parent by the driver's IPC, as verify's child does:

* ``gate``: the host clock from opening the gate word to seeing the flag, less the CUDA events
  around the forwards, as a function of how long the stream waited at the gate before it opened
  (verify writes a phase's inputs while its child waits: milliseconds);
* ``state``: per forward on CUDA events, 112 forwards queued behind the gate, for each of ring
  (the parent's IPC-mapped allocation, or the child's own), inputs (a distinct slot per forward, or
  one), outputs (kept until the phase ends, as verify keeps them, or dropped) and a context kernel
  before each forward (none; a copy that writes the input; a bf16 GEMM that writes it, as the
  model's projection does) whose own phase is subtracted; plus each kernel's profiled duration.

    python3 lab/gpu/gpu_gate_probe.py --out $OUT/gate_probe.json      # on the GPU (~60 s)
    python3 lab/gpu/gpu_gate_probe.py --dry-run --out /tmp/p.json      # CPU plumbing, tiny shapes
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

N = 64  # x 9 launches (reference + context) well inside the launch queue
REPS = 5
WAITS_MS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)


def _candidate(hidden: int, device: str, dtype):
    spec = importlib.util.spec_from_file_location("cand", REPO / "examples" / "substitutions" / "llama_rmsnorm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    m = mod.ModelNew(hidden).to(device=device, dtype=dtype)
    return lambda x: m(x)


def _reference(hidden: int, device: str, dtype):
    import torch

    try:
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

        m = LlamaRMSNorm(hidden, eps=1e-6).to(device=device, dtype=dtype)
        return lambda x: m(x)
    except Exception:  # the same ops as transformers' LlamaRMSNorm
        w = torch.ones(hidden, device=device, dtype=dtype)

        def f(x):
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            return w * h.to(x.dtype)

        return f


def child(handle: bytes, ring_bytes: int, clock_path: str, shape: tuple, dry: bool, q) -> None:
    import torch

    out: dict = {"gate": [], "state": [], "errors": []}
    try:
        cuda = not dry
        device = "cuda:0" if cuda else "cpu"
        dtype = torch.bfloat16
        numel = 1
        for s in shape:
            numel *= s
        slot_bytes = numel * 2
        n = N if not dry else 4
        if cuda:
            from headroom.verify import gate
            from headroom.verify.cuda_ipc import Mapping

            ipc = Mapping(handle, ring_bytes, device).tensor
            sc = gate.StreamClock(clock_path, 0, device)
            import ctypes
            import mmap
            import os

            fd = os.open(clock_path, os.O_RDWR)
            mm = mmap.mmap(fd, gate.PAGE)
            os.close(fd)
            words = (ctypes.c_uint32 * (gate.PAGE // 4)).from_buffer(mm)
        else:
            ipc = torch.empty(ring_bytes, dtype=torch.uint8)
        local = torch.empty(ring_bytes, dtype=torch.uint8, device=device)
        rings = {"ipc": ipc, "local": local}
        for r in rings.values():
            r.view(dtype)[: n * numel].normal_()
        models = {"candidate": _candidate(shape[-1], device, dtype), "reference": _reference(shape[-1], device, dtype)}
        gemm_a = torch.randn(numel // shape[-1], shape[-1], device=device, dtype=dtype)
        gemm_w = torch.randn(shape[-1], shape[-1], device=device, dtype=dtype)
        src = torch.randn(numel, device=device, dtype=dtype)
        token = [0]

        def slot(ring: str, i: int):
            return rings[ring][i * slot_bytes : (i + 1) * slot_bytes].view(dtype).view(shape)

        def phase(fn, ring: str, inputs: str, outputs: str, ctx: str, wait_ms: float = 0.0) -> dict:
            """One gated phase of ``n`` forwards: CUDA events around them, and the host clock open -> flag."""
            kept = []
            if not cuda:
                t0 = time.perf_counter()
                for i in range(n):
                    x = slot(ring, i if inputs == "distinct" else 0)
                    if ctx == "copy":
                        x.view(-1).copy_(src)
                    elif ctx == "gemm":
                        torch.matmul(gemm_a, gemm_w, out=x.view(-1, shape[-1]))
                    if fn is not None:
                        y = fn(x)
                        if outputs == "kept":
                            kept.append(y)
                ms = (time.perf_counter() - t0) * 1e3
                return {"events_ms": ms, "host_ms": ms}
            stream = torch.cuda.current_stream()
            token[0] += 1
            t = token[0]
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            sc.wait(stream.cuda_stream, t)
            a.record(stream)
            for i in range(n):
                x = slot(ring, i if inputs == "distinct" else 0)
                if ctx == "copy":
                    x.view(-1).copy_(src)
                elif ctx == "gemm":
                    torch.matmul(gemm_a, gemm_w, out=x.view(-1, shape[-1]))
                if fn is not None:
                    y = fn(x)
                    if outputs == "kept":
                        kept.append(y)
                    del y
            b.record(stream)
            sc.signal(stream.cuda_stream, t)
            if wait_ms:
                time.sleep(wait_ms / 1e3)
            t0 = time.perf_counter()
            words[0] = t
            while words[gate.SLOTS] != t:
                pass
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            return {"events_ms": a.elapsed_time(b), "host_ms": (t1 - t0) * 1e3}

        def kernels(fn, ring: str, inputs: str, outputs: str) -> dict:
            """Each kernel's profiled duration over one phase (no gate: the profiler's own clock)."""
            if not cuda:
                return {}
            from torch.profiler import ProfilerActivity, profile

            kept = []
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for i in range(n):
                    y = fn(slot(ring, i if inputs == "distinct" else 0))
                    if outputs == "kept":
                        kept.append(y)
                torch.cuda.synchronize()
            per: dict[str, list[float]] = {}
            for e in prof.events():
                if str(getattr(e, "device_type", "")).endswith("CUDA") and e.device_time_total > 0:
                    per.setdefault(e.name[:60], []).append(float(e.device_time_total))
            return {k: {"calls": len(v), "median_us": statistics.median(v)} for k, v in per.items()}

        # warm-up, ungated: a first launch may synchronise (module loads, cuBLAS workspaces), and a
        # synchronisation while the stream waits at a gate the host opens later never returns
        for fn in (*models.values(),):
            for ring in rings:
                for i in range(n):
                    fn(slot(ring, i))
        for i in range(3):
            torch.matmul(gemm_a, gemm_w, out=slot("ipc", i).view(-1, shape[-1]))
            slot("ipc", i).view(-1).copy_(src)
        if cuda:
            torch.cuda.synchronize()
            import threading

            def watchdog() -> None:  # a gate still closed after 20 s: open it, so the record says so
                while not done.is_set():
                    before = token[0]
                    if done.wait(20.0):
                        return
                    if token[0] == before and words[0] != token[0]:
                        out["errors"].append(f"gate {token[0]} opened by the watchdog")
                        words[0] = token[0]

            done = threading.Event()
            threading.Thread(target=watchdog, daemon=True).start()
        for fn in models.values():
            for ring in rings:
                phase(fn, ring, "distinct", "kept", "none")
                phase(fn, ring, "distinct", "kept", "gemm")
                phase(fn, ring, "distinct", "kept", "copy")
        phase(None, "ipc", "distinct", "dropped", "gemm")

        # the gate's wake-up: a null phase and a candidate phase after waits at the gate
        for w in WAITS_MS:
            for kind, fn in (("null", None), ("candidate", models["candidate"])):
                rs = [phase(fn, "ipc", "distinct", "kept", "none", wait_ms=w) for _ in range(REPS)]
                out["gate"].append(
                    {
                        "wait_ms": w,
                        "kind": kind,
                        "host_minus_events_us": [1e3 * (r["host_ms"] - r["events_ms"]) for r in rs],
                        "events_ms": [r["events_ms"] for r in rs],
                    }
                )
                print(
                    f"gate wait {w:4.1f} ms {kind:9s}: host-events "
                    f"{statistics.median(out['gate'][-1]['host_minus_events_us']):8.1f} us",
                    flush=True,
                )

        conds = [
            (ring, inputs, outputs, "none")
            for ring in ("ipc", "local")
            for inputs in ("distinct", "same")
            for outputs in ("kept", "dropped")
        ]
        conds += [
            ("ipc", "distinct", "kept", "copy"),
            ("ipc", "distinct", "kept", "gemm"),
            ("local", "same", "dropped", "gemm"),
        ]
        ctx_only = {}
        for ring, inputs, outputs, ctx in conds:
            if ctx != "none" and (ring, inputs, ctx) not in ctx_only:
                rs = [phase(None, ring, inputs, outputs, ctx)["events_ms"] for _ in range(REPS)]
                ctx_only[(ring, inputs, ctx)] = statistics.median(rs)
            for name, fn in models.items():  # interleaved: candidate, reference, candidate, ...
                rs = [phase(fn, ring, inputs, outputs, ctx)["events_ms"] for _ in range(REPS)]
                base = ctx_only.get((ring, inputs, ctx), 0.0)
                rec = {
                    "model": name,
                    "ring": ring,
                    "inputs": inputs,
                    "outputs": outputs,
                    "context": ctx,
                    "events_ms": rs,
                    "context_ms": base,
                    "us_per_forward": 1e3 * (statistics.median(rs) - base) / n,
                }
                if ctx == "none" and outputs == "kept" or (ring, inputs, outputs) == ("local", "same", "dropped"):
                    rec["kernels"] = kernels(fn, ring, inputs, outputs)
                out["state"].append(rec)
                print(
                    f"{name:9s} ring={ring:5s} inputs={inputs:8s} outputs={outputs:7s} ctx={ctx:4s}: "
                    f"{rec['us_per_forward']:8.2f} us/forward",
                    flush=True,
                )
        # the CPU time of a call (verify's `call_us`): per forward, enqueued behind a closed gate (as
        # verify times it), free-running (the GPU draining the queue) and with the GPU idle before each
        # call (a synchronisation after each, outside the timed call); decode- and prefill-sized inputs
        out["calls"] = []
        for label, shp in (("decode", (1, 1, shape[-1])), ("prefill", shape)):
            small = [torch.randn(shp, device=device, dtype=dtype) for _ in range(n)]
            for name, fn in models.items():
                for mode in ("gated", "free", "idle"):
                    per = []
                    for _ in range(REPS):
                        kept = []
                        if mode == "gated" and cuda:
                            token[0] += 1
                            t = token[0]
                            sc.wait(torch.cuda.current_stream().cuda_stream, t)
                        if mode == "idle":
                            ts = 0.0
                            for x in small:
                                if cuda:
                                    torch.cuda.synchronize()
                                t0 = time.perf_counter()
                                kept.append(fn(x))
                                ts += time.perf_counter() - t0
                        else:
                            t0 = time.perf_counter()
                            for x in small:
                                kept.append(fn(x))
                            ts = time.perf_counter() - t0
                        if mode == "gated" and cuda:
                            sc.signal(torch.cuda.current_stream().cuda_stream, t)
                            words[0] = t
                        if cuda:
                            torch.cuda.synchronize()
                        per.append(1e6 * ts / n)
                    out["calls"].append({"size": label, "model": name, "mode": mode, "us_per_call": per})
                    print(
                        f"call {label:7s} {name:9s} {mode:5s}: {statistics.median(per):7.1f} us "
                        f"[{min(per):.1f}, {max(per):.1f}]",
                        flush=True,
                    )
        by = {(r["ring"], r["inputs"], r["outputs"], r["context"]): {} for r in out["state"]}
        for r in out["state"]:
            by[(r["ring"], r["inputs"], r["outputs"], r["context"])][r["model"]] = r["us_per_forward"]
        out["speedups"] = [
            {
                "condition": "/".join(k),
                "reference_us": v.get("reference"),
                "candidate_us": v.get("candidate"),
                "speedup": v["reference"] / v["candidate"] if v.get("candidate") else None,
            }
            for k, v in by.items()
        ]
        for s in out["speedups"]:
            print(f"{s['condition']:32s} {s['reference_us']:9.2f} / {s['candidate_us']:8.2f} = {s['speedup']:.3f}x")
        if cuda:
            done.set()
    except Exception as e:  # the record says what failed; the parent writes what there is
        import traceback

        out["errors"].append(f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}")
    q.put(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    shape = (4, 2048, 4096) if not a.dry_run else (2, 8, 64)
    numel = 1
    for s in shape:
        numel *= s
    ring_bytes = (N if not a.dry_run else 4) * numel * 2
    handle, path, alloc = b"", "", None
    if not a.dry_run:
        from headroom.verify import gate
        from headroom.verify.cuda_ipc import Allocation

        alloc = Allocation(ring_bytes, "cuda:0")
        handle = alloc.handle
        page = gate.ClockPage()
        page.slot()
        path = page.path
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(handle, ring_bytes, path, shape, a.dry_run, q))
    t0 = time.time()
    p.start()
    out = q.get(timeout=540)
    p.join(30)
    import torch

    out.update(
        {
            "shape": list(shape),
            "n": N,
            "reps": REPS,
            "dry_run": a.dry_run,
            "wall_s": round(time.time() - t0, 1),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "command": "python3 lab/gpu/gpu_gate_probe.py " + " ".join(sys.argv[1:]),
        }
    )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print("errors:", out["errors"] or "none", "| wall", out["wall_s"], "s")
    return 0 if not out["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
