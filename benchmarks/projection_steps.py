"""Single steps of `targets` and `project` on a cached trace, in this checkout and others, alternated.

    python benchmarks/projection_steps.py TRACE [--tree NAME=DIR ...] [--rounds 5] [--out steps.json]

Each round runs every checkout once, in turn, in a fresh process (its `headroom` imported from its folder,
its own cache): the trace is read from the cache, then each step is timed in that process, best of three.
The steps are calls every checkout compared must have: the targets table by op and by kernel (no replays),
`projection.streams.stream_keys`, `intervals.codes_and_texts` of the events' `stream` column, the selector
`category:gemm`, and one replay (`replay_gain` of every seventh event at 1.5x, the plan already built).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.record import emit, stamp, warm  # noqa: E402

_RUN = r"""
import json, sys, time
import numpy as np
from pathlib import Path
from headroom.cli.common import Reader
from headroom.projection import replay
from headroom.projection.baseline import as_baseline
from headroom.projection.matching import select
from headroom.projection.streams import stream_keys
from headroom.projection.targets import targets
from headroom.trace.intervals import codes_and_texts

b = as_baseline(next(iter(Reader().inputs([Path(sys.argv[1])]))))
ev = b.events
mask = np.zeros(len(ev), dtype=bool)
mask[::7] = True
replay.replay_gain(b, 1.5, mask)       # builds the plan and its chains
factors = iter(1.6 + 0.01 * k for k in range(100))     # a new factor each time: replays are memoised
steps = {
    "targets by op (no replay)": lambda: targets(b, by=("op",), replay_top=0),
    "targets by kernel (no replay)": lambda: targets(b, by=("kernel",), replay_top=0),
    "stream_keys": lambda: stream_keys(ev),
    "codes_and_texts(stream)": lambda: codes_and_texts(ev["stream"]),
    "select category:gemm": lambda: select(ev, "category:gemm"),
    "one replay": lambda: replay.replay_gain(b, next(factors), mask),
}
out = {}
for name, step in steps.items():
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    out[name] = best
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    trees = {"this checkout": REPO}
    for spec in args.tree:
        name, _, folder = spec.partition("=")
        if not name or not Path(folder).is_dir():
            raise SystemExit(f"{spec}: expected NAME=DIR of a folder")
        trees[name] = Path(folder).resolve()
    warm(args.trace)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as cache:

        def run(tree: Path, timed: bool) -> dict[str, float] | None:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env["HEADROOM_CACHE_DIR"] = os.path.join(cache, hashlib.sha1(str(tree).encode()).hexdigest()[:8])
            code = _RUN if timed else "import sys; from headroom.cli import main; main()"
            argv = [str(args.trace.resolve())] if timed else ["classify", "--json", str(args.trace.resolve())]
            p = subprocess.run([sys.executable, "-c", code, *argv], cwd=tree, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
            return json.loads(p.stdout.strip().splitlines()[-1]) if timed else None

        for tree in trees.values():  # fills each checkout's cache entry
            run(tree, timed=False)
        names = list(trees)
        for i in range(args.rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                runs[name].append(run(trees[name], timed=True))
    medians = {
        name: {step: round(1e3 * statistics.median(r[step] for r in rs), 2) for step in rs[0]}
        for name, rs in runs.items()
    }
    emit(
        {
            "trace": str(args.trace),
            "trees": {n: str(t) for n, t in trees.items()},
            "median_ms": medians,
            "runs_s": runs,
            **stamp(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
