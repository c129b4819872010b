"""The replay without replaced calls: the chain solver (projection/chains.py) against the event-by-event
sweep on one trace, interleaved (sweep, chains, sweep, ...), with the largest difference of their ends.

    python benchmarks/replay_speed.py TRACE [--repeat 5] [--out results.json]

Each round replays the trace's baseline at one of several factor sets (uniform 1.5x, infinite, a random
mix) and CPU scales; the plan (the part of a replay every factor shares) is built before timing.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time

import numpy as np

from headroom.projection import replay as R
from headroom.projection.amdahl import _factor_array
from headroom.projection.baseline import as_baseline
from headroom.trace.analysis import analyze
from headroom.trace.load import load_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    b = as_baseline(analyze(load_trace(args.trace)))
    plan = R._plan(b, R.BACK_TO_BACK_US, None, R.MAX_STREAM_GAP_US, ())
    dur = b.events["dur"].to_numpy(dtype=float)
    anchor = b.step_start if b.step_start is not None and math.isfinite(b.step_start) else float(b.window[0])
    rng = np.random.default_rng(0)
    cases = [(1.5, 1.0), (math.inf, 1.0), (rng.choice([1.0, 2.0, math.inf], len(dur)), 0.6)]
    times: dict[str, list[float]] = {"sweep": [], "chains": []}
    worst = 0.0
    R._solve_chains(plan, dur.copy(), [R._Clock(anchor - plan.origin, 1.0) for _ in plan.pid_table], 1.0)  # builds
    for r in range(args.repeat):
        for factors, scale in cases:
            f = _factor_array(b, factors, None)
            new_dur = np.where(np.isinf(f), 0.0, dur / f)
            ends = {}
            for name, fn in (("sweep", lambda c: R._sweep(plan, new_dur, (), c, scale)),
                             ("chains", lambda c: R._solve_chains(plan, new_dur, c, scale))):
                clocks = [R._Clock(anchor - plan.origin, scale) for _ in plan.pid_table]
                t0 = time.perf_counter()
                ends[name] = fn(clocks)[0]
                times[name].append(time.perf_counter() - t0)
            worst = max(worst, float(np.nanmax(np.abs(ends["sweep"] - ends["chains"]))) if len(dur) else 0.0)
    out = {"trace": args.trace, "events": len(dur), "blocking_calls": plan.n_sync, "cross_stream_deps": plan.n_deps,
           "segments": sum(1 for s in plan.chains.steps if s[0] == "seg"),
           "median_s": {k: round(statistics.median(v), 4) for k, v in times.items()},
           "max_end_difference_us": worst, "machine": f"{platform.node()} ({platform.processor() or platform.machine()})",
           "date": time.strftime("%Y-%m-%d %H:%M %Z"), "rounds": args.repeat * len(cases)}
    out["sweep_over_chains"] = round(out["median_s"]["sweep"] / out["median_s"]["chains"], 2)
    print(json.dumps(out, indent=1))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
