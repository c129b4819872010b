"""Where the loader's time goes: wall and CPU time of each stage of `analyze`, in one process.

    python benchmarks/loader_stages.py TRACE [--runs 3] [--out stages.json]

Stages are timed by wrapping the loader's own functions (nothing is
re-implemented here), in this process alone (HEADROOM_LOAD_WORKERS=0: with the
worker, decoding overlaps the other stages and cannot be split out), without the
cache. Each run is a fresh load of the same file; the machine's load average is
recorded with each run.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

os.environ["HEADROOM_LOAD_WORKERS"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import headroom.trace.analysis as analysis  # noqa: E402
import headroom.trace.document as document  # noqa: E402
import headroom.trace.kineto as kineto  # noqa: E402
import headroom.trace.load as load  # noqa: E402

STAGES = {
    "read": "read the file (+ gunzip), in blocks",
    "cut": "cut the blocks between events",
    "decode_events": "msgspec decode + routing + polars columns, per chunk",
    "_assemble": "concatenate, order, validate",
    "_tabulate": "polars -> pandas tables",
    "attributed": "attribute GPU activities to launches, ops, ranges, steps",
    "classify_kernels": "classify",
    "rest": "account (busy/idle, wall shares, tables)",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}

    def add(name, w, c):
        wall[name] = wall.get(name, 0.0) + w
        cpu[name] = cpu.get(name, 0.0) + c

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            w, c = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **k)
            finally:
                add(name, time.perf_counter() - w, time.process_time() - c)
        return wrapper

    def timed_iter(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            it = fn(*a, **k)
            while True:
                w, c = time.perf_counter(), time.process_time()
                try:
                    item = next(it)
                except StopIteration:
                    add(name, time.perf_counter() - w, time.process_time() - c)
                    return
                add(name, time.perf_counter() - w, time.process_time() - c)
                yield item
        return wrapper

    document.blocks = timed_iter("read", document.blocks)
    document.split = timed_iter("cut", document.split)
    kineto.decode_events = timed("decode_events", kineto.decode_events)
    load._assemble = timed("_assemble", load._assemble)
    load._tabulate = timed("_tabulate", load._tabulate)
    analysis.attributed = timed("attributed", analysis.attributed)
    analysis.classify_kernels = timed("classify_kernels", analysis.classify_kernels)

    runs = []
    for _ in range(args.runs):
        wall.clear()
        cpu.clear()
        load_avg = os.getloadavg()[0]
        w, c = time.perf_counter(), time.process_time()
        analysis.analyze(args.trace, use_cache=False)
        total_w, total_c = time.perf_counter() - w, time.process_time() - c
        # "cut" includes the reads made inside it.
        wall["cut"] -= wall.get("read", 0.0)
        cpu["cut"] -= cpu.get("read", 0.0)
        add("rest", total_w - sum(wall.values()), total_c - sum(cpu.values()))
        row = {"load_avg_1m": load_avg, "total_wall_s": round(total_w, 3), "total_cpu_s": round(total_c, 3),
               "stages": {STAGES[k]: {"wall_s": round(wall[k], 3), "cpu_s": round(cpu[k], 3)} for k in STAGES if k in wall}}
        runs.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"trace": str(args.trace), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
