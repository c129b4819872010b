"""Loader benchmark: `headroom classify` vs HolisticTraceAnalysis vs plain `json.load`.

Builds a >= 250 MB trace by replicating a real one (its events shifted in time,
with fresh correlation / External ids per copy, so attribution still works),
written in the layout torch.profiler's exporter uses (each event over several
lines), then times, in one run on the same file, each reader in a fresh
subprocess and records wall time and peak RSS. headroom and json.load run
`--repeat` times (HTA, at a minute a run, `--hta-repeat` times); the summary
compares medians.

    python benchmarks/bench_loader.py [--source TRACE] [--mb 250] [--repeat 3] [--out results.json]

Targets ([trace-core]): headroom >= 10x faster than HTA, faster than json.load
alone, and at most half of HTA's peak RSS.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "hta-traces" / "nccl_parser_config__nccl_data.json.gz"

READERS = {
    "headroom": """
from headroom.trace.analysis import analyze
a = analyze(PATH)
result = {"kernels": int((a.events["kind"] == "kernel").sum()), "total_us": a.total_us,
          "categories": len(a.categories)}
""",
    "json.load": """
import json
with open(PATH, "rb") as f:
    doc = json.load(f)
result = {"events": len(doc["traceEvents"])}
""",
    "hta": """
import logging, os, shutil
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
d = os.path.dirname(PATH)
ta = TraceAnalysis(trace_dir=d)
kernel_type_df, kernel_df = ta.get_gpu_kernel_breakdown(visualize=False)
result = {"kernel_rows": len(kernel_df)}
""",
}

CHILD = """
import resource, sys, time, json
PATH = sys.argv[1]
t0 = time.perf_counter()
{body}
elapsed = time.perf_counter() - t0
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"seconds": elapsed, "peak_rss_mb": rss_mb, "result": result}}))
"""


def build_big_trace(source: Path, target_mb: float, out: Path) -> dict:
    raw = source.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc["traceEvents"]
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events if "ts" in e) - \
        min(e["ts"] for e in events if "ts" in e)
    one_copy_mb = len(json.dumps(events)) / 1e6
    copies = max(1, int(target_mb / one_copy_mb) + 1)
    id_stride = 10 ** 7
    big = []
    for c in range(copies):
        shift = c * (span + 1000.0)
        for e in events:
            if e.get("ph") == "M" and c:
                continue
            e2 = dict(e)
            if "ts" in e2:
                e2["ts"] = e2["ts"] + shift
            if "id" in e2 and isinstance(e2["id"], int):
                e2["id"] = e2["id"] + c * id_stride
            args = e2.get("args")
            if args:
                args = dict(args)
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int):
                        args[key] = args[key] + c * id_stride
                e2["args"] = args
            if e2.get("name", "").startswith("ProfilerStep#"):
                e2["name"] = f"ProfilerStep#{int(e2['name'].split('#')[1]) + c * 100}"
            big.append(e2)
    doc["traceEvents"] = big
    out.parent.mkdir(parents=True, exist_ok=True)
    write_kineto_layout(doc, out)
    return {"copies": copies, "events": len(big), "mb": out.stat().st_size / 1e6}


def write_kineto_layout(doc: dict, out: Path) -> None:
    """JSON laid out like torch.profiler's export: one event over several lines, args on their own lines."""
    def items(d: dict) -> str:
        return ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in d.items())

    with open(out, "w") as f:
        f.write("{\n")
        for key, value in doc.items():
            if key != "traceEvents":
                f.write(f"  {json.dumps(key)}: {json.dumps(value)},\n")
        f.write('  "traceEvents": [\n')
        events = doc["traceEvents"]
        for i, e in enumerate(events):
            args = e.get("args")
            f.write("  {\n    " + items({k: v for k, v in e.items() if k != "args"}))
            if args is not None:
                f.write(',\n    "args": {\n      ' + items(args) + "\n    }")
            f.write("\n  }" + (",\n" if i < len(events) - 1 else "\n"))
        f.write("  ]\n}\n")


def run_reader(name: str, path: Path, python: str) -> dict:
    code = CHILD.format(body=READERS[name].strip())
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    p = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return {"reader": name, "error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return {"reader": name, "process_wall_s": wall, **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--mb", type=float, default=250.0)
    ap.add_argument("--out", type=Path, default=None, help="write results JSON here")
    ap.add_argument("--readers", default="headroom,json.load,hta")
    ap.add_argument("--repeat", type=int, default=3, help="runs of headroom and json.load")
    ap.add_argument("--hta-repeat", type=int, default=1, help="runs of HTA")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "ranks" / "rank-0.json"
        info = build_big_trace(args.source, args.mb, trace)
        print(f"built {trace.name}: {info['mb']:.0f} MB, {info['events']:,} events ({info['copies']} copies of {args.source.name})")
        rows = []
        for name in args.readers.split(","):
            for run in range(args.hta_repeat if name == "hta" else args.repeat):
                r = run_reader(name, trace, sys.executable)
                rows.append(r)
                if "error" in r:
                    print(f"{name:>10}: error: {r['error']}")
                else:
                    print(f"{name:>10}: {r['seconds']:7.2f} s   peak RSS {r['peak_rss_mb']:7.0f} MB   {r['result']}")
    by = {}
    for name in args.readers.split(","):
        runs = [r for r in rows if r["reader"] == name and "error" not in r]
        if runs:
            by[name] = {"seconds": statistics.median(r["seconds"] for r in runs),
                        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs), "runs": len(runs)}
    summary = {"median_seconds": {k: v["seconds"] for k, v in by.items()},
               "max_peak_rss_mb": {k: v["peak_rss_mb"] for k, v in by.items()}}
    if "headroom" in by and "hta" in by:
        summary["speedup_vs_hta"] = by["hta"]["seconds"] / by["headroom"]["seconds"]
        summary["rss_ratio_vs_hta"] = by["headroom"]["peak_rss_mb"] / by["hta"]["peak_rss_mb"]
    if "headroom" in by and "json.load" in by:
        summary["speedup_vs_json_load"] = by["json.load"]["seconds"] / by["headroom"]["seconds"]
    for k, v in summary.items():
        print(f"{k}: {v:.2f}" if isinstance(v, float) else f"{k}: {v}")
    result = {"machine": f"{platform.node()} {platform.processor() or platform.machine()} {os.cpu_count()} cores",
              "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"),
              "versions": {m: importlib.metadata.version(m) for m in ("msgspec", "polars", "pandas", "numpy")},
              "trace": info, "readers": rows, "summary": summary}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
