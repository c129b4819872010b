"""Loader benchmark: `headroom classify` vs HolisticTraceAnalysis vs plain `json.load`, per trace shape.

For each shape (benchmarks/shapes.py: inference, training, communication) it
builds a >= 250 MB trace by replicating a real one, then runs every reader in a
fresh subprocess on the same file, round-robin (run 1 of each reader, then run
2, ...), so the ratios compare runs made side by side; each run records wall
time, peak RSS (the reader's and its children's: headroom's worker) and the
machine's load average. The summary compares medians.

    python benchmarks/bench_loader.py [--shapes inference,training,communication] [--mb 250]
                                      [--repeat 3] [--out results.json]
    python benchmarks/bench_loader.py --shapes training --mb 2000 --readers headroom,headroom-worker
    python benchmarks/bench_loader.py --tree old=/path/to/old/checkout --readers headroom,headroom@old ...

Targets: headroom >= 10x faster than HTA, faster than json.load
alone, at most half of HTA's peak RSS; the second command on a trace (cached) <= 1 s.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import shapes  # noqa: E402
from benchmarks.record import warm  # noqa: E402

READERS = {
    "headroom": """
from headroom.trace.analysis import analyze
a = analyze(PATH, use_cache=False)
result = {"kernels": int((a.events["kind"] == "kernel").sum()), "total_us": a.total_us,
          "categories": len(a.categories)}
""",
    # The same, with the worker process forced on (HEADROOM_LOAD_WORKERS=1; by default it runs only when a
    # core is free) or off (=0).
    "headroom-worker": """
from headroom.trace.analysis import analyze
a = analyze(PATH, use_cache=False)
result = {"kernels": int((a.events["kind"] == "kernel").sum()), "total_us": a.total_us,
          "categories": len(a.categories)}
""",
    # The same with numpy's huge-page requests left on (parallel.small_pages turns them off while a trace is
    # assembled, tabulated and analysed): the side-by-side measure of what that saves.
    "headroom-huge-pages": """
import contextlib
import headroom.trace.parallel
headroom.trace.parallel.small_pages = contextlib.nullcontext
from headroom.trace.analysis import analyze
a = analyze(PATH, use_cache=False)
result = {"kernels": int((a.events["kind"] == "kernel").sum()), "total_us": a.total_us,
          "categories": len(a.categories)}
""",
    # The same with the next chunk's scan in this thread, not beside the previous chunk's tables
    # (HEADROOM_SCAN_AHEAD=0; chunks.decode_chunks).
    "headroom-one-thread": """
from headroom.trace.analysis import analyze
a = analyze(PATH, use_cache=False)
result = {"kernels": int((a.events["kind"] == "kernel").sum()), "total_us": a.total_us,
          "categories": len(a.categories)}
""",
    "headroom-1proc": """
from headroom.trace.analysis import analyze
a = analyze(PATH, use_cache=False)
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
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
rss_mb = me.ru_maxrss / 1024
children_mb = kids.ru_maxrss / 1024
cpu_s = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime   # every thread, and the worker process
sys_s = me.ru_stime + kids.ru_stime     # of it, in the kernel (page faults, reads)
print(json.dumps({{"seconds": elapsed, "cpu_s": cpu_s, "sys_s": sys_s, "minor_faults": me.ru_minflt + kids.ru_minflt,
                  "peak_rss_mb": rss_mb, "children_peak_rss_mb": children_mb, "result": result}}))
"""

# The second command on a trace: the whole CLI process (imports included), after one run filled the cache.
CACHED_COMMAND = ["-m", "headroom.cli", "classify", "--json"]


def load_average() -> float:
    return os.getloadavg()[0]


# Other checkouts to run a reader from (`--tree NAME=PATH`: reader `headroom@NAME`), side by side with this
# one: an A/B of two commits in one run, where the machine's drift between runs would bias two runs.
TREES: dict[str, Path] = {}


def run_reader(name: str, path: Path, python: str, cache_dir: Path) -> dict:
    warm(path)
    reader = name
    name, _, tree = name.partition("@")
    repo = TREES[tree] if tree else REPO
    env = dict(
        os.environ,
        PYTHONPATH=str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        HEADROOM_CACHE_DIR=str(cache_dir),
    )
    if name == "headroom-1proc":
        env["HEADROOM_LOAD_WORKERS"] = "0"
    if name == "headroom-worker":
        env["HEADROOM_LOAD_WORKERS"] = "1"
    if name == "headroom-one-thread":
        env["HEADROOM_SCAN_AHEAD"] = "0"
    load = load_average()
    if name == "headroom-cached":
        # As a user's install runs it: with its modules' bytecode written (pip compiles it at install;
        # PYTHONDONTWRITEBYTECODE=1, set on some machines, would recompile every module every run).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        # Fill the cache (not timed), then time the whole second command.
        subprocess.run([python, *CACHED_COMMAND, str(path)], capture_output=True, env=env, check=False, cwd=repo)
        t0 = time.perf_counter()
        p = subprocess.run([python, *CACHED_COMMAND, str(path)], capture_output=True, text=True, env=env, cwd=repo)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            return {"reader": reader, "error": p.stderr.strip()[-300:]}
        shutil.rmtree(cache_dir, ignore_errors=True)
        return {
            "reader": reader,
            "seconds": wall,
            "process_wall_s": wall,
            "load_avg_1m": load,
            "peak_rss_mb": None,
            "result": {"total_us": json.loads(p.stdout)["total_us"]},
        }
    code = CHILD.format(body=READERS[name].strip())
    t0 = time.perf_counter()
    returncode, stdout, stderr, at_once = run_sampled([python, "-c", code, str(path)], env, cwd=repo)
    wall = time.perf_counter() - t0
    if returncode != 0:
        return {"reader": reader, "error": stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {returncode}"}
    out = json.loads(stdout.strip().splitlines()[-1])
    # Two measures: the sum of the reader's and its worker's own peaks (an upper bound: the two need not
    # peak at once), and the largest total of both sampled at the same moment (every 20 ms).
    out["peak_rss_mb"] = out["peak_rss_mb"] + out.pop("children_peak_rss_mb")
    out["peak_rss_at_once_mb"] = at_once / 2**20
    return {"reader": reader, "process_wall_s": wall, "load_avg_1m": load, **out}


def _tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (Linux /proc)."""
    total = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            total += next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")), 0)
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except (OSError, ValueError):
        return total
    return total + sum(_tree_rss(k) for k in kids)


def run_sampled(cmd: list[str], env: dict, cwd: Path | None = None) -> tuple[int, str, str, int]:
    """Run `cmd`, polling its process tree's resident memory until it ends: (exit code, stdout, stderr,
    the largest total seen). Its pipes are read by threads meanwhile, so it never blocks on them."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    text: dict[str, str] = {}
    readers = [
        threading.Thread(target=lambda s=s, k=k: text.__setitem__(k, s.read()), daemon=True)
        for s, k in ((p.stdout, "out"), (p.stderr, "err"))
    ]
    for t in readers:
        t.start()
    peak = 0
    while p.poll() is None:
        peak = max(peak, _tree_rss(p.pid))
        time.sleep(0.02)
    for t in readers:
        t.join()
    return p.returncode, text.get("out", ""), text.get("err", ""), peak


def bench_shape(
    shape: str, mb: float, readers: list[str], repeat: int, hta_repeat: int, tmp: Path, existing: Path | None = None
) -> dict:
    trace = tmp / shape / "rank-0.json"  # HTA reads a directory of ranks
    if existing is not None:  # a trace built before (benchmarks/shapes.py): linked, not copied
        trace.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(existing.resolve(), trace)
        info = {"source": existing.name, "copies": None, "events": None, "mb": round(existing.stat().st_size / 1e6, 1)}
    else:
        info = shapes.build(shapes.SHAPES[shape], mb, trace)
    print(
        f"[{shape}] {info['mb']:.0f} MB"
        + (
            f", {info['events']:,} events ({info['copies']} copies of {info['source']})"
            if info["events"]
            else f": {info['source']}"
        ),
        flush=True,
    )
    rows = []
    for run in range(max(repeat, hta_repeat)):
        for name in readers:
            if run >= (hta_repeat if name == "hta" else repeat):
                continue
            r = run_reader(name, trace, sys.executable, tmp / "cache")
            r["run"] = run
            rows.append(r)
            if "error" in r:
                print(f"[{shape}] {name:>15}: error: {r['error']}", flush=True)
            else:
                rss = f"{r['peak_rss_mb']:7.0f} MB" if r.get("peak_rss_mb") else "      -   "
                print(
                    f"[{shape}] {name:>15}: {r['seconds']:7.2f} s   peak RSS {rss}   load {r['load_avg_1m']:.1f}   "
                    f"{r['result']}",
                    flush=True,
                )
    trace.unlink()
    by = {}
    for name in readers:
        runs = [r for r in rows if r["reader"] == name and "error" not in r]
        if runs:
            rss = [r["peak_rss_mb"] for r in runs if r.get("peak_rss_mb")]
            by[name] = {
                "seconds": statistics.median(r["seconds"] for r in runs),
                "peak_rss_mb": max(rss) if rss else None,
                "runs": len(runs),
            }
    summary = {
        "median_seconds": {k: v["seconds"] for k, v in by.items()},
        "max_peak_rss_mb": {k: v["peak_rss_mb"] for k, v in by.items()},
    }
    if "headroom" in by and "hta" in by:
        summary["speedup_vs_hta"] = by["hta"]["seconds"] / by["headroom"]["seconds"]
        summary["rss_ratio_vs_hta"] = by["headroom"]["peak_rss_mb"] / by["hta"]["peak_rss_mb"]
    if "headroom" in by and "json.load" in by:
        summary["speedup_vs_json_load"] = by["json.load"]["seconds"] / by["headroom"]["seconds"]
    for k, v in summary.items():
        print(
            f"[{shape}] {k}: "
            + (json.dumps({a: round(b, 2) if b else b for a, b in v.items()}) if isinstance(v, dict) else f"{v:.2f}"),
            flush=True,
        )
    return {"trace": info, "readers": rows, "summary": summary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="inference,training,communication")
    ap.add_argument("--mb", type=float, default=250.0)
    ap.add_argument("--out", type=Path, default=None, help="write results JSON here")
    ap.add_argument("--readers", default="headroom,headroom-worker,headroom-cached,json.load,hta")
    ap.add_argument("--repeat", type=int, default=3, help="runs of every reader but HTA")
    ap.add_argument("--hta-repeat", type=int, default=3, help="runs of HTA")
    ap.add_argument("--tmp", type=Path, default=None, help="where to build the traces (default: a temporary dir)")
    ap.add_argument("--trace", type=Path, default=None, help="use this trace (one shape) instead of building it")
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="another checkout: readers named headroom@NAME run from it, side by side",
    )
    args = ap.parse_args()
    for spec in args.tree:
        tree_name, _, where = spec.partition("=")
        if not tree_name or not Path(where, "headroom").is_dir():
            raise SystemExit(f"--tree {spec}: expected NAME=PATH of a headroom checkout")
        TREES[tree_name] = Path(where).resolve()
    readers = args.readers.split(",")
    result = {
        "machine": f"{platform.node()} {platform.processor() or platform.machine()} {os.cpu_count()} cores, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "versions": {m: importlib.metadata.version(m) for m in ("msgspec", "polars", "pandas", "numpy")},
        "command": " ".join(sys.argv),
        "shapes": {},
    }
    if args.tmp:
        Path(args.tmp).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for shape in args.shapes.split(","):
            result["shapes"][shape] = bench_shape(
                shape, args.mb, readers, args.repeat, args.hta_repeat, Path(tmp), args.trace
            )
            if args.out:
                args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
