"""Where the loader's time goes: wall time of each stage of `load_trace` + `analyze`, in one process.

    python benchmarks/loader_stages.py TRACE [--runs 3]

Stages are timed by wrapping the loader's own functions (so nothing is
re-implemented here); each run is a fresh load of the same file.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
import warnings

with warnings.catch_warnings(record=True) as import_warnings:
    warnings.simplefilter("always")
    import polars as pl

import headroom.trace.kineto as kineto
import headroom.trace.load as load
from headroom.trace.analysis import analyze

STAGES = {
    "_read_bytes": "read (+ gunzip)",
    "_typed_events": "polars parse (join + read_ndjson)",
    "_split_by_table": "filter + split by table",
    "_device_args": "device args (msgspec)",
    "_tabulate": "polars -> pandas tables",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    spent: dict[str, float] = {}

    def timed(name: str, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
        return wrapper

    for name in STAGES:
        module = load if name == "_tabulate" else kineto   # where each stage is looked up when called
        setattr(module, name, timed(name, getattr(module, name)))
    top = kineto._DECODER
    kineto._DECODER = type("TimedDecoder", (), {"decode": staticmethod(timed("top", top.decode))})()

    runs = []
    for _ in range(args.runs):
        spent.clear()
        t0 = time.perf_counter()
        trace = load.load_trace(args.trace)
        t1 = time.perf_counter()
        analyze(trace)
        t2 = time.perf_counter()
        row = {STAGES.get(k, "msgspec top-level split" if k == "top" else k): round(v, 3) for k, v in spent.items()}
        row["load total"] = round(t1 - t0, 3)
        row["analyze (attribute + classify + account)"] = round(t2 - t1, 3)
        runs.append(row)
        print(json.dumps(row))
    print(json.dumps({"polars_threads": pl.thread_pool_size(),
                      "polars_import_warnings": [str(w.message) for w in import_warnings]}))


if __name__ == "__main__":
    main()
