"""A directory of per-rank traces: `headroom classify DIR` as it runs by default (with a core free, the worker
process decodes every other rank while this one decodes and analyses the one before: `load.iter_traces`),
one file at a time (HEADROOM_LOAD_WORKERS=0), one rank alone, and with `--ray` the same command with
`--engine ray` (one task per rank: a local Ray cluster started by the command, and `--address` of one this
script started before the rounds, as a cluster already running would be; `--ray-cpus 1 2`: one such cluster of
each size, all up through the rounds, so that one and two workers are compared).

    python benchmarks/rank_directory.py [--ranks 4] [--mb 250] [--shape communication] [--dir DIR] [--gzip]
                                        [--cache] [--tree NAME=DIR] [--ray] [--ray-cpus 2 ...] [--repeat 3]
                                        [--out results.json]

The ranks are copies of one benchmark shape (`benchmarks/shapes.py`; the communication shape is an A100
NCCL rank) whose `distributedInfo` says rank k of N, so the directory is read as the ranks of one run
(a RankSet: collectives paired across ranks). Each run is a whole CLI process without the cache
(`--no-cache`; with `--cache`, the first command as users run it: an empty cache each run, filled by it),
the variants alternating round by round; recorded per run: wall time, CPU time, and the
process tree's resident memory sampled every 20 ms (the largest total at one moment: the worker's and this
process's together; for a cluster started before the rounds, also its own process tree's, which holds the
tasks' workers). With `--ray`, each round also runs one task alone (`headroom.fleet.traces.run_task` on rank 0
in a fresh process): its time, its peak memory and the pickled size of what it sends back.
`--tree old=/tmp/old`: also the default of another checkout (`git worktree add /tmp/old COMMIT`, its C scanner
copied in), run from its folder, side by side. The JSON the variants print is compared: the worker must not
change an answer.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import resource
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
from benchmarks.bench_loader import _tree_rss, run_sampled  # noqa: E402
from benchmarks.record import emit, stamp, warm  # noqa: E402
from headroom.trace.parallel import needed_memory  # noqa: E402

VARIANTS = {
    # name: (environment, what it reads, the checkout it runs from)
    "default": ({}, "dir", REPO),
    "one at a time": ({"HEADROOM_LOAD_WORKERS": "0"}, "dir", REPO),
    "one rank alone": ({}, "rank-0", REPO),
}
ARGS: dict[str, list[str]] = {}  # a variant's extra command-line arguments (--ray)
CLUSTERS: dict[str, subprocess.Popen] = {}  # a variant's cluster started before the rounds (its holder)
NO_TOKEN = {"RAY_AUTH_MODE": "disabled"}  # a second driver joins without the cluster's token file


def start_cluster(cpus: int) -> tuple[subprocess.Popen, str]:
    """A local Ray cluster of `cpus` CPUs held by a child process (ended with it): its address."""
    code = (
        "import signal, sys, time, ray\n"
        f"ray.init(num_cpus={cpus}, object_store_memory=500 * 2**20, include_dashboard=False)\n"
        "signal.signal(signal.SIGTERM, lambda *a: (ray.shutdown(), sys.exit(0)))\n"
        "print(ray.get_runtime_context().gcs_address, flush=True)\n"
        "while True: time.sleep(3600)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO, env=os.environ | NO_TOKEN
    )
    return holder, holder.stdout.readline().strip()


def build_ranks(shape: str, mb: float, ranks: int, folder: Path, gz: bool) -> list[Path]:
    """rank-0.json .. rank-{N-1}.json (.json.gz with `gz`, level 1): one shape built once, copied line by line
    with its distributedInfo rewritten (memory stays that of one line)."""
    files = [folder / f"rank-{k}.json{'.gz' if gz else ''}" for k in range(ranks)]
    if all(f.exists() for f in files):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / "base.json.tmp"
    shapes.build(shapes.SHAPES[shape], mb, base)
    for k, out in enumerate(files):
        with open(base) as src, gzip.open(out, "wt", compresslevel=1) if gz else open(out, "w") as dst:
            for line in src:
                if line.startswith('  "distributedInfo":'):
                    info = json.loads(line.split(":", 1)[1].rstrip().rstrip(","))
                    info.update(rank=k, world_size=ranks)
                    for pg in info.get("pg_config", []):
                        pg.update(pg_size=ranks, ranks=list(range(ranks)))
                    line = f'  "distributedInfo": {json.dumps(info)},\n'
                dst.write(line)
    base.unlink()
    return files


def run(variant: str, folder: Path, first: Path, cache: Path | None) -> dict:
    env_extra, target, cwd = VARIANTS[variant]
    env = {k: v for k, v in os.environ.items() if k != "HEADROOM_LOAD_WORKERS"} | env_extra
    path = folder if target == "dir" else first
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
        env["HEADROOM_CACHE_DIR"] = str(cache)
    holder = CLUSTERS.get(variant)
    cluster: dict[str, int] = {}
    done = threading.Event()
    if holder is not None:  # the cluster's own tree (its raylet and the tasks' workers), sampled alongside
        cluster["idle"] = _tree_rss(holder.pid)

        def sample() -> None:
            while not done.is_set():
                cluster["peak"] = max(cluster.get("peak", 0), _tree_rss(holder.pid))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rc, out, err, peak = run_sampled(
        [
            sys.executable,
            "-m",
            "headroom.cli",
            "classify",
            "--json",
            *([] if cache else ["--no-cache"]),
            *ARGS.get(variant, []),
            str(path),
        ],
        env,
        cwd=cwd,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    done.set()
    if holder is not None:
        sampler.join()
    if rc != 0:
        raise SystemExit(f"{variant}: exit {rc}: {err.strip().splitlines()[-1] if err.strip() else ''}")
    return {
        "variant": variant,
        "wall_s": round(wall, 3),
        "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 3),
        "peak_rss_at_once_mb": round(peak / 2**20, 1),
        **(
            {
                "cluster_idle_rss_mb": round(cluster["idle"] / 2**20, 1),
                "cluster_peak_rss_mb": round(cluster.get("peak", 0) / 2**20, 1),
            }
            if holder is not None
            else {}
        ),
        "load_avg_1m_before": round(load, 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "output_sha256": hashlib.sha256(out.encode()).hexdigest()[:16],
        "kind": json.loads(out).get("kind"),
    }


ONE_TASK = """import json, pickle, sys, time
from headroom.fleet.traces import TraceTask, run_task, task_memory
from headroom.trace.read_options import ReadOptions
t0 = time.perf_counter()
r = run_task(TraceTask(sys.argv[1], ReadOptions(use_cache=False), cwd=sys.argv[2]))
wall = time.perf_counter() - t0
assert r.error is None, r.error
with open("/proc/self/status") as f:    # the peak of this process (ru_maxrss is kept across exec)
    hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
events = r.analysis.events
print(json.dumps({"task_s": round(wall, 3), "sent_bytes": len(pickle.dumps(r, protocol=5)),
                  "event_rows": len(events), "events_bytes": int(events.memory_usage(deep=True).sum()),
                  "asked_memory_mb": round(task_memory(sys.argv[1]) / 2**20, 1),
                  "max_rss_mb": round(hwm / 2**20, 1)}))
"""


def one_task(first: Path) -> dict:
    """One Ray task's work on rank 0, in a fresh process of its own (as a Ray worker runs it): the task's own
    time (the imports not counted), its peak memory, and the pickled size of the TraceResult it returns."""
    warm(first)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    rc, out, err, peak = run_sampled(
        [sys.executable, "-c", ONE_TASK, str(first), str(REPO)],
        {k: v for k, v in os.environ.items() if k != "HEADROOM_LOAD_WORKERS"},
        cwd=REPO,
    )
    if rc != 0:
        raise SystemExit(f"one task: exit {rc}: {err.strip().splitlines()[-1] if err.strip() else ''}")
    return {
        "variant": "one task (run_task in a fresh process)",
        "wall_s": round(time.perf_counter() - t0, 3),
        **json.loads(out),
        "peak_rss_at_once_mb": round(peak / 2**20, 1),
        "load_avg_1m_before": round(load, 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--mb", type=float, default=250.0)
    ap.add_argument("--shape", choices=sorted(shapes.SHAPES), default="communication")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/headroom-ranks"))
    ap.add_argument("--gzip", action="store_true", help="gzip the ranks (level 1), as torch.profiler's handler may")
    ap.add_argument("--cache", action="store_true", help="the first command with the cache on (emptied each run)")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--ray", action="store_true", help="also --engine ray (a local cluster; an existing one)")
    ap.add_argument(
        "--ray-cpus",
        type=int,
        nargs="+",
        default=[2],
        metavar="N",
        help="with --ray: the CPUs of each cluster started before the rounds (one cluster per N)",
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    for spec in args.tree:
        name, _, folder = spec.partition("=")
        if not name or not Path(folder).is_dir():
            raise SystemExit(f"{spec}: expected NAME=DIR of a checkout")
        VARIANTS[f"default [{name}]"] = ({}, "dir", Path(folder).resolve())
    if any(n < 1 for n in args.ray_cpus):
        raise SystemExit("--ray-cpus: expected counts of 1 or more")
    try:
        if args.ray:
            VARIANTS["engine ray"] = ({}, "dir", REPO)
            ARGS["engine ray"] = ["--engine", "ray"]
            for n in args.ray_cpus:
                name = f"engine ray, {n}-CPU cluster up"
                CLUSTERS[name], address = start_cluster(n)
                VARIANTS[name] = (NO_TOKEN, "dir", REPO)
                ARGS[name] = ["--engine", "ray", "--address", address]
        bench(args)
    finally:
        for holder in CLUSTERS.values():
            holder.terminate()
            holder.wait(timeout=60)


def bench(args) -> None:
    files = build_ranks(args.shape, args.mb, args.ranks, args.dir, args.gzip)
    for f in files:
        warm(f)
    runs = []
    tasks: list[dict] = []
    cache = Path(tempfile.mkdtemp(prefix="headroom-rank-cache-")) if args.cache else None
    for r in range(args.repeat):
        order = list(VARIANTS)
        order = order[r % len(order) :] + order[: r % len(order)]  # each variant first in turn
        for v in order:
            for f in files:
                warm(f)
            runs.append({"round": r, **run(v, args.dir, files[0], cache)})
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
        if args.ray:
            tasks.append({"round": r, **one_task(files[0])})
            print(json.dumps(tasks[-1]), file=sys.stderr, flush=True)
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
    med = {
        v: {
            "wall_s": statistics.median(x["wall_s"] for x in runs if x["variant"] == v),
            "peak_rss_at_once_mb": max(x["peak_rss_at_once_mb"] for x in runs if x["variant"] == v),
            **(
                {"cluster_peak_rss_mb": max(x["cluster_peak_rss_mb"] for x in runs if x["variant"] == v)}
                if v in CLUSTERS
                else {}
            ),
        }
        for v in VARIANTS
    }
    one = (
        {
            "one_task": tasks,
            "one_task_median": {
                k: statistics.median(x[k] for x in tasks)
                for k in ("task_s", "sent_bytes", "max_rss_mb", "asked_memory_mb")
            },
        }
        if tasks
        else {}
    )
    dir_outputs = {x["output_sha256"] for x in runs if VARIANTS[x["variant"]][1] == "dir"}
    emit(
        {
            "command": "benchmarks/rank_directory.py " + " ".join(sys.argv[1:]),
            "shape": args.shape,
            "ranks": args.ranks,
            "gzip": args.gzip,
            "cache": args.cache,
            "mb_per_rank": round(files[0].stat().st_size / 1e6, 1),
            "needed_memory_per_rank_mb": round(needed_memory(files[0]) / 1e6, 1),
            "runs": runs,
            "median": med,
            **one,
            "default_vs_one_at_a_time": round(med["default"]["wall_s"] / med["one at a time"]["wall_s"], 3),
            "default_vs_ranks_x_one_rank": round(
                med["default"]["wall_s"] / (args.ranks * med["one rank alone"]["wall_s"]), 3
            ),
            **({f"{v}_vs_default": round(med[v]["wall_s"] / med["default"]["wall_s"], 3) for v in ARGS}),
            "same_output_every_directory_run": len(dir_outputs) == 1,
            **stamp(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
