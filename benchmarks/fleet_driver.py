"""What the driver of `--engine ray` holds and does, measured so that it can be scaled (docs/scale.md).

    python benchmarks/fleet_driver.py [--dir /tmp/headroom-ranks] [--ranks 8 32 128] [--results 44 440 4400]
                                      [--repeat 3] [--out results.json]

Ranks: one task (`headroom.fleet.traces.run_task` on the directory's rank-0, in this process, twice: the
first pays the imports a Ray worker pays once) and its peak memory; its result is pickled as Ray would send
it, then, in a fresh process per count, unpickled that many times as ranks 0..N-1 of one run (each copy's
`distributedInfo` rewritten): the driver's resident memory for holding them, and the time of the reduction a
directory of ranks gets (`headroom.trace.rank_set.group_ranks`, then the `classify --json` document of the
RankSet: `RankSet.to_dict` and its JSON text); and that reduction's two parts timed apart: what each rank's
events give alone (activity segments, communication split, collectives) and the pairing across ranks
(collectives matched, clocks aligned, waits). The copies are one rank's collectives N times, so every
collective is matched on every rank, as in a run whose ranks all finish.

Results: the 44 KernelBench level-1 results measured on the H200 (`docs/gpu/measure/kernelbench_l1.*.json.gz`)
rebuilt as `VerifyResult`s: the pickled size of one (what an actor sends back), and, for a suite of N results
(the 44 repeated), the memory the driver holds for them, the cost of streaming them as `--out` does
(`headroom.fleet.verify.ResultStream`: one JSON line per result, flushed and fsynced), the one write of the
suite document at the end, and, for scale, one rewrite of that whole document (what a stream that rewrote
the document after every result would pay at each result).

    python benchmarks/fleet_driver.py --results-only [--results 44 440 4400] [--out results.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.record import emit, stamp, warm  # noqa: E402

MEASURED = [REPO / "docs/gpu/measure/kernelbench_l1.a.json.gz", REPO / "docs/gpu/measure/kernelbench_l1.b.json.gz"]

HOLD = """import json, pickle, sys, time
def rss(field="VmRSS:"):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field))
from headroom.cli.output import document
from headroom.jsonio import dumps, plain
from headroom.trace import comm, rank_set
blob, n, repeat = open(sys.argv[1], "rb").read(), int(sys.argv[2]), int(sys.argv[3])
before = rss()
t0 = time.perf_counter()
held = []
for k in range(n):
    r = pickle.loads(blob)
    info = r.analysis.metadata["distributedInfo"]
    info.update(rank=k, world_size=n)
    for pg in info.get("pg_config", []):
        pg.update(pg_size=n, ranks=list(range(n)))
    held.append(r.analysis)
unpickle_s = time.perf_counter() - t0
held_bytes = rss() - before
group, render, per_rank, across, size = [], [], [], [], 0
ranks = list(range(n))
for _ in range(repeat):
    # The reduction's two parts, timed apart: what each rank's events give on their own, and the pairing.
    t0 = time.perf_counter()
    segments = {r: comm.activity_segments(a) for r, a in zip(ranks, held)}
    splits = {r: comm.comm_split(a, segments[r]) for r, a in zip(ranks, held)}
    each = {r: comm.collectives(a) for r, a in zip(ranks, held)}
    t1 = time.perf_counter()
    matched, _ = rank_set.match_collectives(each)
    rank_set._waits(matched, rank_set.clock_offsets(matched, ranks, held))
    t2 = time.perf_counter()
    per_rank.append(t1 - t0)
    across.append(t2 - t1)
    del segments, splits, each, matched
    t0 = time.perf_counter()
    inputs, notes = rank_set.group_ranks(held, source="ranks")
    t1 = time.perf_counter()
    assert len(inputs) == 1 and not isinstance(inputs[0], type(held[0])), "not one rank set"
    text = dumps(document("classify.ranks", inputs[0].to_dict()))
    t2 = time.perf_counter()
    group.append(t1 - t0)
    render.append(t2 - t1)
    size = len(text)
    del inputs
print(json.dumps({"ranks": n, "unpickle_s": round(unpickle_s, 3), "held_mb": round(held_bytes / 2**20, 1),
                  "held_mb_per_rank": round(held_bytes / 2**20 / n, 2), "group_ranks_s": [round(x, 3) for x in group],
                  "per_rank_part_s": [round(x, 3) for x in per_rank],
                  "across_ranks_part_s": [round(x, 3) for x in across],
                  "classify_json_s": [round(x, 3) for x in render], "classify_json_bytes": size,
                  "peak_rss_mb": round(rss("VmHWM:") / 2**20, 1)}))     # not ru_maxrss: kept across exec
"""


def one_result(first: Path) -> tuple[bytes, dict]:
    """rank-0's task result, pickled (protocol 5, as Ray's serializer writes it), with what it holds."""
    from headroom.fleet.traces import TraceTask, run_task, task_memory
    from headroom.trace.comm import activity_segments, collectives, comm_split
    from headroom.trace.read_options import ReadOptions

    warm(first)
    os.environ["HEADROOM_LOAD_WORKERS"] = "0"
    times, peak = [], 0
    r = None
    for _ in range(2):  # the first pays the imports inside run_task; a Ray worker pays them once
        r = None
        t0 = time.perf_counter()
        r = run_task(TraceTask(str(first), ReadOptions(use_cache=False), cwd=str(REPO)))
        times.append(time.perf_counter() - t0)
        peak = peak or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # the first task's peak
    if r.error is not None:
        raise SystemExit(f"{first}: {r.error}")
    a = r.analysis
    tables = {name: getattr(a, name) for name in ("events", "categories", "kernels", "ops", "steps", "modules")}
    # What the reduction reads of a rank's events: its activity segments and, of those, its collectives
    # (each could be computed in the task instead of sent as the events).
    tables["segments"] = segments = activity_segments(a)
    tables["collectives"] = collectives(a)
    blob = pickle.dumps(r, protocol=5)
    return blob, {
        "trace": str(first),
        "trace_mb": round(first.stat().st_size / 1e6, 1),
        "task_s_first": round(times[0], 3),
        "task_s": round(times[1], 3),
        "max_rss_mb": round(peak / 2**20, 1),
        "asked_memory_mb": round(task_memory(str(first)) / 2**20, 1),
        "sent_bytes": len(blob),
        "comm_split_bytes": len(pickle.dumps(comm_split(a, segments), protocol=5)),
        "rows": {k: len(v) for k, v in tables.items()},
        "pickled_bytes": {k: len(pickle.dumps(v, protocol=5)) for k, v in tables.items()},
    }


def hold(blob_path: Path, n: int, repeat: int) -> dict:
    p = subprocess.run(
        [sys.executable, "-c", HOLD, str(blob_path), str(n), str(repeat)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=os.environ | {"PYTHONPATH": str(REPO)},
    )
    if p.returncode != 0:
        raise SystemExit(f"{n} ranks: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
    row = json.loads(p.stdout)
    row["group_ranks_s_median"] = statistics.median(row["group_ranks_s"])
    row["classify_json_s_median"] = statistics.median(row["classify_json_s"])
    row["per_rank_part_s_median"] = statistics.median(row["per_rank_part_s"])
    row["across_ranks_part_s_median"] = statistics.median(row["across_ranks_part_s"])
    row["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return row


def verify_results() -> list:
    from headroom.verify.compare import Check
    from headroom.verify.results import VerifyResult

    names = set(VerifyResult.__dataclass_fields__)
    out = []
    for f in MEASURED:
        for d in json.load(gzip.open(f))["results"]:
            d = {k: v for k, v in d.items() if k in names}
            d["checks"] = [Check(**c) for c in d["checks"]]
            d["flags"] = [Check(c["name"], False, c["detail"]) for c in d["flags"]]
            out.append(VerifyResult(**d))
    return out


def streamed(results: list, counts: list[int], repeat: int) -> list[dict]:
    from headroom.fleet.verify import ResultStream, stream_path
    from headroom.verify.results import suite_document, write_json

    rows = []
    blobs = [pickle.dumps(r, protocol=5) for r in results]
    with tempfile.TemporaryDirectory(prefix="headroom-stream-") as tmp:
        out = Path(tmp) / "results.json"
        for n in counts:
            tracemalloc.start()
            done = [pickle.loads(blobs[i % len(blobs)]) for i in range(n)]  # each its own objects, as received
            for i, r in enumerate(done):  # each copy its own candidate: the stream keys lines by candidate
                r.candidate = f"{r.candidate}#{i}"
            held = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            times, appends = [], []
            for _ in range(repeat):
                t0 = time.perf_counter()
                write_json(suite_document(done, "NVIDIA H200", missing_candidates=[]), out)
                times.append(time.perf_counter() - t0)
                stream = ResultStream(stream_path(out))
                each = []
                for r in done:
                    t1 = time.perf_counter()
                    stream.write(r)
                    each.append(time.perf_counter() - t1)
                stream.close()
                appends.append(each)
            per = sorted(x for each in appends for x in each)
            rows.append(
                {
                    "results": n,
                    "append_ms_median": round(statistics.median(per) * 1e3, 3),
                    "append_ms_p99": round(per[int(0.99 * (len(per) - 1))] * 1e3, 3),
                    "append_s_total": [round(sum(e), 3) for e in appends],
                    "stream_bytes": stream_path(out).stat().st_size,
                    "final_write_s": [round(t, 3) for t in times],
                    "final_write_s_median": round(statistics.median(times), 3),
                    "document_bytes": out.stat().st_size,
                    "held_mb": round(held / 2**20, 1),
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def main() -> None:
    from headroom.jsonio import plain

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--dir",
        type=Path,
        default=Path("/tmp/headroom-ranks"),
        help="a directory of ranks (benchmarks/rank_directory.py builds one)",
    )
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 32, 128])
    ap.add_argument("--results", type=int, nargs="+", default=[44, 440, 4400])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--results-only", action="store_true", help="only the verify results (no ranks)")
    args = ap.parse_args()
    if args.results_only:
        results = verify_results()
        emit(
            {
                "command": "benchmarks/fleet_driver.py " + " ".join(sys.argv[1:]),
                "streamed_document": streamed(results, args.results, args.repeat),
                **stamp(),
            },
            args.out,
        )
        return
    first = args.dir / "rank-0.json"
    if not first.is_file():
        raise SystemExit(f"{first}: no such trace (benchmarks/rank_directory.py --dir {args.dir} builds it)")
    if any(n < 1 for n in args.ranks + args.results):
        raise SystemExit("--ranks/--results: expected counts of 1 or more")
    blob, task = one_result(first)
    print(json.dumps(task), file=sys.stderr, flush=True)
    ranks = []
    with tempfile.TemporaryDirectory(prefix="headroom-driver-") as tmp:
        blob_path = Path(tmp) / "result.pkl"
        blob_path.write_bytes(blob)
        del blob
        for n in args.ranks:
            ranks.append(hold(blob_path, n, args.repeat))
            print(json.dumps(ranks[-1]), file=sys.stderr, flush=True)
    results = verify_results()
    sizes = [len(pickle.dumps(r, protocol=5)) for r in results]
    texts = [len(json.dumps(plain(r), indent=2)) for r in results]
    emit(
        {
            "command": "benchmarks/fleet_driver.py " + " ".join(sys.argv[1:]),
            "one_task": task,
            "ranks": ranks,
            "verify_result": {
                "count": len(results),
                "pickled_bytes_median": statistics.median(sizes),
                "pickled_bytes_max": max(sizes),
                "json_bytes_median": statistics.median(texts),
                "json_bytes_max": max(texts),
                "elapsed_s_median": statistics.median(r.elapsed_s for r in results),
                "elapsed_s_max": max(r.elapsed_s for r in results),
            },
            "streamed_document": streamed(results, args.results, args.repeat),
            **stamp(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
