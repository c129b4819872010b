"""Where a command on a cached trace spends its time: its imports, reading the cached analysis, and each
step of `targets` (the Amdahl ranking, the replay plan, the replays, drawing the table), stage by stage in one
fresh process per run.

    python lab/probes/command_stages.py TRACE [--runs 3] [--out stages.json]

Each run is a new interpreter (bytecode written as an install has it: PYTHONDONTWRITEBYTECODE is dropped), so
the imports are timed as a command pays them; the trace's cache entry is filled by one untimed run first.
The stages are what `headroom targets TRACE` does, called through the same API in the same order; the
interpreter's own start (`python -c pass`) is timed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.record import emit, stamp, warm  # noqa: E402

# One run, in its own interpreter: prints {stage: seconds} as JSON on its last line.
_RUN = r"""
import json, sys, time
t = time.perf_counter()
stages = {}
def mark(name):
    global t
    now = time.perf_counter(); stages[name] = now - t; t = now
import numpy, pandas; mark("import numpy, pandas")
import typer, rich.console, rich.table; mark("import typer, rich")
from pathlib import Path
from headroom.cli.common import Reader
from headroom.projection import replay
from headroom.projection.baseline import as_baseline
from headroom.projection.targets import targets
from headroom.report.render_projection import render_targets
mark("import headroom's modules")
analysis = next(iter(Reader().inputs([Path(sys.argv[1])]))); mark("read the cached analysis")
b = as_baseline(analysis); b.events; b.runtime; b.syncs; mark("the baseline (events, runtime calls, syncs)")
table = targets(b, by=("op", "module"), replay_top=0); mark("targets: the Amdahl ranking")
replay._chains(replay._plan(b, replay.BACK_TO_BACK_US, None, replay.MAX_STREAM_GAP_US, ())); mark("targets: the replay plan")
table = targets(b, by=("op", "module"), replay_top=5); mark("targets: the ranking again and 10 replays")
render_targets(analysis, table, 1.5, rich.console.Console(file=open("/dev/null", "w"), width=160))
mark("drawing the table")
print(json.dumps(stages))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as cache:
        env["HEADROOM_CACHE_DIR"] = cache
        warm(args.trace)
        subprocess.run(
            [sys.executable, "-m", "headroom.cli", "classify", "--json", str(args.trace)],
            env=env,
            cwd=REPO,
            capture_output=True,
            check=True,
        )  # fills the cache entry
        runs: list[dict[str, float]] = []
        starts: list[float] = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            starts.append(time.perf_counter() - t0)
            p = subprocess.run(
                [sys.executable, "-c", _RUN, str(args.trace.resolve())],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            if p.returncode != 0:
                raise SystemExit(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
            runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    medians = {stage: round(statistics.median(r[stage] for r in runs), 4) for stage in runs[0]}
    emit(
        {
            "trace": str(args.trace),
            "interpreter_start_s": round(statistics.median(starts), 4),
            "runs_s": [{k: round(v, 4) for k, v in r.items()} for r in runs],
            "median_s": medians,
            "median_total_s": round(sum(medians.values()), 4),
            **stamp(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
