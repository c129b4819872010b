"""trace/codes.factorized against pandas.factorize on the attributed events' text columns of a trace,
interleaved (pandas, ours, pandas, ...), medians per column and in all; the codes are checked equal.

    python benchmarks/codes_speed.py TRACE [--repeat 5] [--out results.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for benchmarks.record

from benchmarks.record import emit, stamp  # noqa: E402
from headroom.trace.attribute import attribute_kernels_to_ops  # noqa: E402
from headroom.trace.codes import factorized  # noqa: E402
from headroom.trace.load import load_trace  # noqa: E402

COLUMNS = ("name", "kind", "launch_name", "op", "top_op", "annotation", "module", "phase")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    ev = attribute_kernels_to_ops(load_trace(args.trace))  # computed, not read back: text shared as built
    rows = {}
    for c in COLUMNS:
        if c not in ev.columns:
            continue
        col = np.asarray(ev[c], dtype=object)
        times = {"pandas": [], "factorized": []}
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            theirs = pd.factorize(col, sort=False)
            times["pandas"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ours = factorized(col)
            times["factorized"].append(time.perf_counter() - t0)
            assert np.array_equal(ours[0], theirs[0]) and list(ours[1]) == list(theirs[1]), c
        rows[c] = {k: round(statistics.median(v) * 1e3, 2) for k, v in times.items()}
        rows[c]["distinct"] = int(len(theirs[1]))
    total = {k: round(sum(r[k] for r in rows.values()), 1) for k in ("pandas", "factorized")}
    out = {
        "trace": args.trace,
        "events": len(ev),
        "median_ms": rows,
        "total_ms": total,
        "pandas_over_factorized": round(total["pandas"] / total["factorized"], 2),
        **stamp(),
    }
    emit(out, args.out)


if __name__ == "__main__":
    main()
