"""Where the analysis' time goes: cProfile of `analyze` on a trace's tables read from the cache (the load
is left out), cumulative seconds of headroom's own functions.

    python lab/probes/analysis_profile.py TRACE [--top 25]
    PYTHONPATH=/path/to/other/checkout python lab/probes/analysis_profile.py TRACE    # another version

The first run on a trace loads it and fills the cache (HEADROOM_CACHE_DIR, else the user cache).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

import headroom.trace.tables as tables
from headroom.trace.analysis import analyze
from headroom.trace.load import load_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    trace = load_trace(args.trace)
    for name in tables.TRACE_TABLES:  # read now, not inside the profile
        getattr(trace, name)
    trace.cache_key = None  # no cached analysis: computed
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.runcall(analyze, trace)
    print(f"analyze under cProfile: {time.perf_counter() - t0:.2f} s ({tables.__file__})", file=sys.stderr)
    pstats.Stats(profile).sort_stats("cumulative").print_stats(r"headroom/trace", args.top)


if __name__ == "__main__":
    main()
