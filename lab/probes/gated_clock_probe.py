"""Facts the gated clock of `headroom verify` rests on, measured on a GPU (one command, ~1 minute).

    python3 lab/probes/gated_clock_probe.py --out DIR

1. stream memory operations (cuStreamWaitValue32 / cuStreamWriteValue32) on host memory that two
   processes share: a stream gated on a word the other process writes, a flag written back;
2. how many launches a gated stream takes before the CPU blocks (the queue depth);
3. identical kernels in two child processes, timed gate -> flag on the parent's clock, interleaved
   A B / B A: the spread of the ratio, against CUDA events in the children;
4. the cost of freezing and thawing a child (SIGSTOP/SIGCONT) and of one sample gather through a
   segment mapped once.
Writes DIR/gated_clock_probe.json.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import multiprocessing as mp
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

WORDS = 64


def _lib():
    lib = ctypes.CDLL("libcuda.so.1")
    for n in (
        "cuStreamWaitValue32_v2",
        "cuStreamWriteValue32_v2",
        "cuMemHostRegister_v2",
        "cuMemHostGetDevicePointer_v2",
        "cuPointerGetAttribute",
        "cuIpcGetMemHandle",
        "cuIpcOpenMemHandle_v2",
    ):
        getattr(lib, n).restype = ctypes.c_int
    return lib


def _register(lib, buf: mmap.mmap) -> int:
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    rc = lib.cuMemHostRegister_v2(ctypes.c_void_p(addr), ctypes.c_size_t(len(buf)), ctypes.c_uint(1 | 2))
    if rc:
        raise RuntimeError(f"cuMemHostRegister {rc}")
    dptr = ctypes.c_uint64(0)
    rc = lib.cuMemHostGetDevicePointer_v2(ctypes.byref(dptr), ctypes.c_void_p(addr), ctypes.c_uint(0))
    if rc:
        raise RuntimeError(f"cuMemHostGetDevicePointer {rc}")
    return dptr.value


def _work(kind: str, device):
    import torch

    if kind == "rmsnorm":
        x = [torch.randn(4, 2048, 4096, device=device, dtype=torch.bfloat16) for _ in range(3)]
        w = torch.ones(4096, device=device, dtype=torch.bfloat16)

        def f(i):
            h = x[i % 3].float()
            v = h.pow(2).mean(-1, keepdim=True)
            return w * (h * torch.rsqrt(v + 1e-6)).to(torch.bfloat16)

        return f, 8
    if kind == "matmul1k":
        a = [torch.randn(1024, 1024, device=device) for _ in range(3)]
        return (lambda i: a[i % 3] @ a[(i + 1) % 3]), 1
    if kind == "add_small":
        a = [torch.randn(128, device=device) for _ in range(3)]
        return (lambda i: a[i % 3] + a[(i + 1) % 3]), 1
    if kind == "relu_big":
        a = [torch.randn(1 << 28, device=device) for _ in range(2)]
        return (lambda i: torch.relu(a[i % 2])), 1
    raise ValueError(kind)


def child_main(conn, shm_path: str, slot: int, pin: str = ""):
    import torch

    if pin:  # both children on the same CPUs (their command buffers on the same memory node)
        os.sched_setaffinity(0, {int(c) for c in pin.split(",")})

    lib = _lib()
    torch.cuda.init()
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    fd = os.open(shm_path, os.O_RDWR)
    buf = mmap.mmap(fd, 4096)
    dptr = _register(lib, buf)
    gate_d, flag_d = dptr + 4 * slot, dptr + 4 * (slot + 8)
    stream = torch.cuda.current_stream()
    sh = ctypes.c_void_p(stream.cuda_stream)
    funcs = {}
    while True:
        msg = conn.recv()
        if msg[0] == "bye":
            conn.send("ok")
            return
        _, kind, n, token, gated = msg
        if kind not in funcs:
            funcs[kind] = _work(kind, dev)
            for i in range(3):
                funcs[kind][0](i)
            torch.cuda.synchronize()
        f, _ = funcs[kind]
        t0 = time.perf_counter()
        if gated:
            rc = lib.cuStreamWaitValue32_v2(sh, ctypes.c_uint64(gate_d), ctypes.c_uint32(token), ctypes.c_uint(0))
            assert rc == 0, rc
        outs = []
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        for i in range(n):
            outs.append(f(i))
        e1.record()
        rc = lib.cuStreamWriteValue32_v2(sh, ctypes.c_uint64(flag_d), ctypes.c_uint32(token), ctypes.c_uint(0))
        assert rc == 0, rc
        t1 = time.perf_counter()
        conn.send(("queued", (t1 - t0) * 1e3))
        conn.recv()  # "events?"
        torch.cuda.synchronize()
        conn.send(("events", e0.elapsed_time(e1)))
        del outs


def queue_depth(out: dict) -> None:
    """Launches a gated stream accepts before the CPU blocks."""
    import torch

    lib = _lib()
    torch.zeros(1, device="cuda")  # a current context: registering host memory needs one
    fd, path = tempfile.mkstemp(dir="/dev/shm")
    os.ftruncate(fd, 4096)
    buf = mmap.mmap(fd, 4096)
    dptr = _register(lib, buf)
    word = ctypes.c_uint32.from_buffer(buf, 0)
    word.value = 0
    s = torch.cuda.Stream()
    x = torch.zeros(16, device="cuda")
    res = {}
    for tag, op in (("add_", lambda: x.add_(1)), ("cat3", lambda: torch.cat([x, x, x]))):
        word.value = 0
        token = 1
        with torch.cuda.stream(s):
            assert (
                lib.cuStreamWaitValue32_v2(
                    ctypes.c_void_p(s.cuda_stream), ctypes.c_uint64(dptr), ctypes.c_uint32(token), ctypes.c_uint(0)
                )
                == 0
            )
            stamps = []
            opened = threading.Event()

            def opener():
                time.sleep(3.0)
                opened.set()
                word.value = token

            th = threading.Thread(target=opener)
            th.start()
            t0 = time.perf_counter()
            k = 0
            while k < 60000 and not opened.is_set():
                op()
                k += 1
                if k % 64 == 0:
                    stamps.append((k, time.perf_counter() - t0))
            blocked_at = None
            for k1, t1 in stamps:
                if t1 > 2.5:
                    blocked_at = k1
                    break
            th.join()
        torch.cuda.synchronize()
        res[tag] = {
            "launched_before_open": k,
            "first_stamp_after_2_5s": blocked_at,
            "us_per_launch_first_256": (stamps[3][1] / 256 * 1e6) if len(stamps) > 3 else None,
        }
    out["queue_depth"] = res
    os.unlink(path)


def ab(out: dict, rounds: int, kinds: list[str], pin: str = "") -> None:

    ctx = mp.get_context("spawn")
    fd, path = tempfile.mkstemp(dir="/dev/shm")
    os.ftruncate(fd, 4096)
    buf = mmap.mmap(fd, 4096)
    kids = []
    for slot in range(2):
        a, b = ctx.Pipe()
        p = ctx.Process(target=child_main, args=(b, path, slot, pin))
        p.start()
        kids.append((p, a, slot))
    token = [0]
    results = {}

    def phase(k, kind, n, gated):
        p, conn, slot = k
        token[0] += 1
        tok = token[0]
        gate = ctypes.c_uint32.from_buffer(buf, 4 * slot)
        flag = ctypes.c_uint32.from_buffer(buf, 4 * (slot + 8))
        os.kill(p.pid, signal.SIGCONT)
        ts = time.perf_counter()
        conn.send(("run", kind, n, tok, gated))
        if not gated:
            t0 = ts
        conn.recv()
        tq = time.perf_counter()
        t_stop0 = time.perf_counter()
        os.kill(p.pid, signal.SIGSTOP)
        t_stop = time.perf_counter() - t_stop0
        if gated:
            t0 = time.perf_counter()
            gate.value = tok
        while flag.value != tok:
            pass
        t1 = time.perf_counter()
        os.kill(p.pid, signal.SIGCONT)
        conn.send("events?")
        ev = conn.recv()[1]
        os.kill(p.pid, signal.SIGSTOP)
        return {"wall_ms": (t1 - t0) * 1e3, "enqueue_ms": (tq - ts) * 1e3, "events_ms": ev, "stop_ms": t_stop * 1e3}

    sizes = {"rmsnorm": 40, "matmul1k": 400, "add_small": 600, "relu_big": 20}
    for kind, n in ((k, sizes[k]) for k in kinds):
        for gated in (True, False):
            for k in kids:
                phase(k, kind, n, gated)
            per = []
            for r in range(rounds):
                order = kids if r % 2 == 0 else kids[::-1]
                ph = {k[2]: phase(k, kind, n, gated) for k in order}
                per.append(ph)
            ratios = [p[0]["wall_ms"] / p[1]["wall_ms"] for p in per]
            eratios = [p[0]["events_ms"] / p[1]["events_ms"] for p in per]
            results[f"{kind}/{'gated' if gated else 'plain'}{'/pinned' if pin else ''}"] = {
                "n": n,
                "ratio_median": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "events_ratio_median": statistics.median(eratios),
                "events_ratio_min": min(eratios),
                "events_ratio_max": max(eratios),
                "wall_ms_per_iter": statistics.median(p[0]["wall_ms"] for p in per) / n,
                "events_ms_per_iter": statistics.median(p[0]["events_ms"] for p in per) / n,
                "enqueue_ms_per_iter": statistics.median(p[0]["enqueue_ms"] for p in per) / n,
                "stop_ms": statistics.median(p[0]["stop_ms"] for p in per),
            }
            print(
                kind,
                gated,
                pin,
                json.dumps(results[f"{kind}/{'gated' if gated else 'plain'}{'/pinned' if pin else ''}"]),
                flush=True,
            )
    for p, conn, _ in kids:
        os.kill(p.pid, signal.SIGCONT)
        conn.send(("bye",))
        conn.recv()
        p.join(10)
    out.setdefault("ab", {}).update(results)
    os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--kinds", default="rmsnorm,matmul1k,add_small,relu_big")
    ap.add_argument("--pin", default="", help="CPUs both children run on, e.g. 0,1 (also run unpinned)")
    a = ap.parse_args()
    import torch

    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    t0 = time.time()
    try:
        queue_depth(out)
    except Exception as e:  # noqa: BLE001
        out["queue_depth_error"] = repr(e)
    print(json.dumps(out.get("queue_depth")), flush=True)
    try:
        ab(out, a.rounds, a.kinds.split(","))
        if a.pin:
            ab(out, a.rounds, a.kinds.split(","), a.pin)
    except Exception:  # noqa: BLE001
        import traceback

        out["ab_error"] = traceback.format_exc()
        print(out["ab_error"])
    out["seconds"] = time.time() - t0
    Path(a.out, "gated_clock_probe.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
