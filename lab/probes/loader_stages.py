"""Where the loader's time goes: wall time, CPU time, time in the kernel and minor page faults of each stage of
`analyze`, in one process.

    python lab/probes/loader_stages.py TRACE [--runs 3] [--out stages.json] [--numpy-huge-pages]

Stages are timed by wrapping the loader's own functions (nothing is
re-implemented here), in this process alone (HEADROOM_LOAD_WORKERS=0: with the
worker, decoding overlaps the other stages and cannot be split out), without the
cache. Each run is a fresh load of the same file; the machine's load average is
recorded with each run. `--numpy-huge-pages` leaves numpy's huge-page requests on
(parallel.small_pages does nothing), for the side-by-side measure of what turning them off saves.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import sys
import time
from pathlib import Path

os.environ["HEADROOM_LOAD_WORKERS"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import headroom.trace.analysis as analysis  # noqa: E402
import headroom.trace.document as document  # noqa: E402
import headroom.trace.load as load  # noqa: E402
import headroom.trace.parallel as parallel  # noqa: E402
import headroom.trace.scan as scan  # noqa: E402

STAGES = {
    "read": "read the file (+ gunzip), in blocks",
    "cut": "cut the blocks between events",
    "decode_events": "scan (or msgspec decode) + routing + polars columns, per chunk",
    "_assemble": "concatenate, order, validate",
    "tabulate": "polars -> pandas tables",
    "attributed": "attribute GPU activities to launches, ops, ranges, steps",
    "classify_kernels": "classify",
    "rest": "account (busy/idle, wall shares, tables)",
}
MEASURES = ("wall_s", "cpu_s", "sys_s", "minor_faults")


def _now() -> tuple[float, float, float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), time.process_time(), r.ru_stime, r.ru_minflt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--numpy-huge-pages", action="store_true")
    args = ap.parse_args()
    if args.numpy_huge_pages:
        parallel.small_pages = contextlib.nullcontext
    spent: dict[str, list[float]] = {}

    def add(name, before, after):
        row = spent.setdefault(name, [0.0, 0.0, 0.0, 0.0])
        for i in range(4):
            row[i] += after[i] - before[i]

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            before = _now()
            try:
                return fn(*a, **k)
            finally:
                add(name, before, _now())

        return wrapper

    def timed_iter(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            it = fn(*a, **k)
            while True:
                before = _now()
                try:
                    item = next(it)
                except StopIteration:
                    add(name, before, _now())
                    return
                add(name, before, _now())
                yield item

        return wrapper

    document.blocks = timed_iter("read", document.blocks)
    document.split = timed_iter("cut", document.split)
    scan.decode_events = timed("decode_events", scan.decode_events)
    load._assemble = timed("_assemble", load._assemble)
    load.tabulate = timed("tabulate", load.tabulate)
    analysis.attributed = timed("attributed", analysis.attributed)
    analysis.classify_kernels = timed("classify_kernels", analysis.classify_kernels)

    runs = []
    for _ in range(args.runs):
        spent.clear()
        load_avg = os.getloadavg()[0]
        before = _now()
        analysis.analyze(args.trace, use_cache=False)
        total = [b - a for a, b in zip(before, _now())]
        # "cut" includes the reads made inside it.
        spent["cut"] = [c - r for c, r in zip(spent["cut"], spent.get("read", [0.0] * 4))]
        spent["rest"] = [t - sum(v[i] for v in spent.values()) for i, t in enumerate(total)]
        row = {
            "load_avg_1m": load_avg,
            "numpy_huge_pages": args.numpy_huge_pages,
            **{f"total_{m}": round(t, 3) for m, t in zip(MEASURES, total)},
            "stages": {STAGES[k]: {m: round(v, 3) for m, v in zip(MEASURES, spent[k])} for k in STAGES if k in spent},
        }
        runs.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"trace": str(args.trace), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
