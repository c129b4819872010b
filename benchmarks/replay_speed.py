"""The replay without replaced calls: the chain solver (projection/chains.py) against the event-by-event
sweep on one trace, interleaved (sweep, chains, sweep, ...), with the largest difference of their ends.

    python benchmarks/replay_speed.py TRACE [--repeat 5] [--out results.json]

Each round replays the trace's baseline at one of several factor sets (uniform 1.5x, infinite, a random
mix) and CPU scales; the plan (the part of a replay every factor shares) is built before timing.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for benchmarks.record

from benchmarks.record import emit, stamp  # noqa: E402
from headroom.projection import replay as R  # noqa: E402
from headroom.projection.amdahl import _factor_array  # noqa: E402
from headroom.projection.baseline import as_baseline  # noqa: E402
from headroom.trace.analysis import analyze  # noqa: E402
from headroom.trace.load import load_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    b = as_baseline(analyze(load_trace(args.trace)))
    plan = R._plan(b, R.BACK_TO_BACK_US, None, R.MAX_STREAM_GAP_US, ())
    dur = b.events["dur"].to_numpy(dtype=float)
    rng = np.random.default_rng(0)
    cases = [(1.5, 1.0), (math.inf, 1.0), (rng.choice([1.0, 2.0, math.inf], len(dur)), 0.6)]
    times: dict[str, list[float]] = {"sweep": [], "chains": []}
    worst = 0.0
    R._chains(plan)  # built once per plan, as replay does
    for _r in range(args.repeat):
        for factors, scale in cases:
            f = _factor_array(b, factors, None)
            new_dur = np.where(np.isinf(f), 0.0, dur / f)
            ends = {}
            for name, fn in (
                ("sweep", lambda c: R._sweep(plan, new_dur, (), c, scale)),
                ("chains", lambda c: R._solve_chains(plan, new_dur, c, scale)),
            ):
                clocks = R._clocks(b, plan, scale)
                t0 = time.perf_counter()
                ends[name] = fn(clocks)[0]
                times[name].append(time.perf_counter() - t0)
            worst = max(worst, float(np.nanmax(np.abs(ends["sweep"] - ends["chains"]))) if len(dur) else 0.0)
    out = {
        "trace": args.trace,
        "events": len(dur),
        "blocking_calls": plan.n_sync,
        "cross_stream_deps": plan.n_deps,
        "segments": sum(1 for s in plan.chains.steps if s[0] == "seg"),
        "median_s": {k: round(statistics.median(v), 4) for k, v in times.items()},
        "max_end_difference_us": worst,
        "rounds": args.repeat * len(cases),
        **stamp(),
    }
    out["sweep_over_chains"] = round(out["median_s"]["sweep"] / out["median_s"]["chains"], 2)
    emit(out, args.out)


if __name__ == "__main__":
    main()
