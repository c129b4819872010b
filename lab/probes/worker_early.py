"""Whether the second core helps a trace under the worker's size threshold: the whole `analyze` of a trace in
one process (A), with the worker decoding the second half (B), and with that worker started before this
process imports numpy, pandas and headroom's analysis (C). One run per call; alternate the modes yourself:

    for r in 1 2 3; do for m in A B C; do python lab/probes/worker_early.py $m /tmp/training.json; done; done

Prints the seconds of the imports, of `analyze` and of both.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    t0 = time.perf_counter()
    mode, trace = sys.argv[1], sys.argv[2]
    early = None
    if mode == "C":
        from headroom.trace.worker import Worker  # the standard library only: the worker starts now

        early = Worker()
    t1 = time.perf_counter()
    import headroom.trace.analysis as analysis
    import headroom.trace.load as load
    import headroom.trace.parallel as parallel

    if mode in ("B", "C"):
        parallel.WORKER_MIN_BYTES = 0  # the threshold lifted for this trace
        os.environ["HEADROOM_LOAD_WORKERS"] = "1"
    if early is not None:
        load.Worker = lambda: early  # type: ignore[assignment,misc]
    t2 = time.perf_counter()
    a = analysis.analyze(trace, use_cache=False, whole_trace=True)
    t3 = time.perf_counter()
    print(f"{mode} imports {t2 - t1:.3f} analyze {t3 - t2:.3f} total {t3 - t0:.3f} s ({len(a.events)} events)")
    os._exit(0)


if __name__ == "__main__":
    main()
