"""`headroom project` and `headroom targets` against `headroom classify` on the same trace, and the second
(cached) command: whole CLI processes, round-robin, medians of --repeat runs.

    python benchmarks/bench_commands.py TRACE [--repeat 3] [--out results.json]

Target: project and targets within 1.5x of classify; the cached classify <= 1 s.
Each run records wall time, CPU time (user + system of the command and its children) and the
machine's load average, so runs on a busy machine can be told apart.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for benchmarks.record

from benchmarks.record import warm  # noqa: E402

COMMANDS = {
    "classify": ["classify", "--json"],
    "project": ["project", "--json", "-s", "category:addressable=1.5"],
    "targets": ["targets", "--json"],
}


def run(args: list[str], env: dict) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "headroom.cli", *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "load_avg_1m": round(load, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows: dict[str, list[dict]] = {name: [] for name in [*COMMANDS, "classify (cached)"]}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, HEADROOM_CACHE_DIR=cache)
        # As a user's install runs: with bytecode written (pip compiles it at install time).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for _ in range(args.repeat):
            for name, cmd in COMMANDS.items():
                warm(args.trace)  # every command finds the trace in the page cache, not just the later ones
                rows[name].append(run([*cmd, "--no-cache", str(args.trace)], env))
            run([*COMMANDS["classify"], str(args.trace)], env)  # fills the cache
            rows["classify (cached)"].append(run([*COMMANDS["classify"], str(args.trace)], env))
            print(json.dumps({k: v[-1] for k, v in rows.items()}), flush=True)
    summary = {
        k: {
            "median_wall_s": statistics.median(r["wall_s"] for r in v),
            "median_cpu_s": statistics.median(r["cpu_s"] for r in v),
        }
        for k, v in rows.items()
    }
    for k in ("project", "targets"):
        summary[f"{k}_vs_classify_wall"] = summary[k]["median_wall_s"] / summary["classify"]["median_wall_s"]
        summary[f"{k}_vs_classify_cpu"] = summary[k]["median_cpu_s"] / summary["classify"]["median_cpu_s"]
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(
            json.dumps(
                {
                    "trace": str(args.trace),
                    "date": time.strftime("%Y-%m-%d %H:%M %Z"),
                    "runs": rows,
                    "summary": summary,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
