"""[distributed-h200x2] in one command: three multi-rank runs on 2 GPUs, their report, and cross-rank projections.

    OUT=/path/for/results python3 lab/gpu/gpu_distributed.py "$OUT"          (on the 2-GPU machine)
    python3 lab/gpu/gpu_distributed.py OUT --dry [--only resnet-50]           (CPU, gloo, tiny models)

Runs, each in its own process with a time limit (a failure never stops the rest):

    headroom profile llama-7b --mode train --nproc 2 --parallel fsdp      (FSDP2, bf16 params, fp32 reduce)
    headroom profile resnet-50 --nproc 2 --parallel ddp                   (DDP, bf16 autocast, channels-last)
    headroom profile dlrm --nproc 2                                       (torchrec planner: table/row-wise, fbgemm TBE)

then analyses each directory of ranks (categories across ranks, overlapped vs exposed communication,
waits, the slowest rank) and projects one scenario through the collectives: every addressable kernel
1.5x faster on every rank, on the slowest rank only and on the others only, next to the one-GPU
projection of the shipped single-GPU trace of the same workload (traces/), when there is one.

Needs on the GPU machine: torch (CUDA), transformers, msgspec, polars, pandas, numpy; torchrec and the
CUDA fbgemm-gpu for dlrm (carried wheels on PYTHONPATH). typer/rich are not needed. NVLink multicast
stays off in every rank (headroom.profile.launch sets NCCL_NVLS_ENABLE=0 and the others).

Writes under OUT (at most 8 files, each under 16 MB):
    ranks.tar           every run's directory: rank traces and manifest.json (for traces/multi/);
                        split in ranks.tar.partN of 15 MB when larger (at most 5 parts)
    results.json        per run: status, wall time, the rank-set analysis, the projections
    report.md           the multi-rank report as markdown tables (for docs/gpu-results.md)
    distributed.log     every run's output
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FILE = 15 * 2**20
SCENARIO = "category:addressable=1.5"

# (id, workload, options, single-GPU trace in traces/ to compare with, time limit s)
GPU_RUNS = [
    ("llama-7b-fsdp", "llama-7b", {"mode": "train", "parallel": "fsdp"}, None, 300),
    ("resnet-50-ddp", "resnet-50", {"parallel": "ddp"}, "resnet-50.train.json.gz", 180),
    ("dlrm-torchrec", "dlrm", {}, "dlrm.train.json.gz", 240),
]
DRY_OPTIONS = {
    "llama-7b-fsdp": {"flavour": "tiny", "batch": 1, "seq": 32},
    "resnet-50-ddp": {"flavour": "tiny", "batch": 2},
    "dlrm-torchrec": {"flavour": "tiny", "batch": 64},
}


def run_one(arg: str) -> int:
    """One multi-rank profile (its own process: a hang or crash never stops the others)."""
    from headroom.errors import UserError
    from headroom.profile.launch import profile_ranks
    from headroom.profile.workload import Options

    a = json.loads(arg)
    t0 = time.time()
    try:
        r = profile_ranks(
            a["workload"],
            Options(**a["options"]),
            nproc=2,
            device=a["device"],
            out=a["out"],
            command=a["command"],
            **a["steps"],
        )
    except UserError as e:
        print(f"headroom: error: {e}", file=sys.stderr)
        return 2
    Path(a["result"]).write_text(
        json.dumps({"out_dir": str(r.out_dir), "wall_s": time.time() - t0, "traces": [str(p) for p in r.traces]})
    )
    return 0


def summarise(out_dir: Path, single: Path | None) -> dict:
    """The rank-set analysis and the projections of one run (numbers for results.json and report.md)."""
    from headroom.jsonio import plain
    from headroom.projection.project import project
    from headroom.projection.speedups import parse_cli_speedup
    from headroom.projection.sync_projection import SyncModel, project_ranks
    from headroom.trace.analysis import analyze, analyze_path
    from headroom.trace.rank_set import rank_set

    rs = rank_set(analyze_path(out_dir), source=str(out_dir))
    model = SyncModel.from_rank_set(rs)
    entries = [parse_cli_speedup(SCENARIO)]
    slow = rs.slowest_rank
    others = [r for r in rs.ranks if r != slow]
    proj = {
        name: plain(project_ranks(rs, entries, on_ranks=on, model=model))
        for name, on in (("all_ranks", None), ("slowest_rank", [slow]), ("other_ranks", others))
    }
    d = rs.to_dict()
    d.pop("rank_analyses")
    d["projections"] = proj
    d["one_gpu"] = None
    if single is not None and single.exists():
        res = project(analyze(single), entries)
        d["one_gpu"] = {
            "trace": str(single.relative_to(ROOT)),
            "baseline_per_step_us": res.per_step_us,
            **{
                m: {"gain": res.get(m).gain, "per_step_us": res.get(m).per_step_us}
                for m in ("amdahl", "replay")
                if res.get(m)
            },
        }
    return d


def report_md(results: dict) -> str:
    lines = [f"# Multi-rank runs ({results['device']}, {results['date']})", ""]
    for run_id, r in results["runs"].items():
        lines.append(f"## {run_id}: `{r['command']}`")
        if r["status"] != "ok":
            lines += [f"status: {r['status']}", ""]
            continue
        s = r["analysis"]
        lines += [
            f"{len(s['ranks'])} ranks ({s['backend']}, {s['parallel']}); synchronised step "
            f"{s['step_us'] / 1000:.2f} ms; slowest rank {s['slowest_rank']}; {s['collectives']} collectives paired",
            "",
            "| rank | step ms | idle | compute ms | comm ms | overlapped ms | exposed ms | waited ms | addressable |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for p in s["per_rank"]:
            lines.append(
                f"| {p['rank']} | {p['step_us'] / 1000:.2f} | {100 * p['idle_fraction']:.1f}% | "
                f"{p['compute_busy_us'] / 1000:.2f} | {p['comm_busy_us'] / 1000:.2f} | "
                f"{p['comm_overlapped_us'] / 1000:.2f} | {p['comm_exposed_us'] / 1000:.2f} | "
                f"{p['wait_us'] / 1000:.2f} | {100 * p['addressable_fraction']:.1f}% |"
            )
        lines += [
            "",
            "| category | min ms | median ms | max ms | median share | addressable |",
            "|---|---|---|---|---|---|",
        ]
        for c in s["categories"]:
            lines.append(
                f"| {c['name']} | {c['min_us'] / 1000:.2f} | {c['median_us'] / 1000:.2f} | "
                f"{c['max_us'] / 1000:.2f} | {100 * c['median_fraction']:.1f}% | "
                f"{'yes' if c['addressable'] else 'no'} |"
            )
        lines += [
            "",
            f"Projection, `{SCENARIO}`:",
            "",
            "| applied on | synchronised step | gain | one-rank Amdahl gains |",
            "|---|---|---|---|",
        ]
        for name, p in s["projections"].items():
            sync = p["synchronised"]["speedups"]
            alone = ", ".join(f"rank {a['rank']}: {100 * a['gain']:.1f}%" for a in p["per_rank_amdahl"])
            lines.append(
                f"| {name.replace('_', ' ')} | {sync['baseline_per_step_us'] / 1000:.2f} -> "
                f"{sync['per_step_us'] / 1000:.2f} ms | {100 * sync['gain']:.1f}% | {alone} |"
            )
        one = s.get("one_gpu")
        if one:
            lines.append(
                f"| one GPU ({one['trace']}) | {one['baseline_per_step_us'] / 1000:.2f} ms | "
                + ", ".join(f"{m} {100 * one[m]['gain']:.1f}%" for m in ("amdahl", "replay") if m in one)
                + " | |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def tar_runs(run_dirs: list[Path], dest: Path) -> list[Path]:
    """The runs' directories in one tar (traces are gzip'd already), split in parts under MAX_FILE
    (join them with `cat ranks.tar.part* > ranks.tar`)."""
    with tarfile.open(dest, "w") as t:
        for d in run_dirs:
            # manifest.json's lock file (headroom/profile/manifest.py) is no part of the run
            t.add(d, arcname=d.name, filter=lambda m: None if m.name.endswith(".lock") else m)
    if dest.stat().st_size <= MAX_FILE:
        return [dest]
    parts = []
    data = dest.read_bytes()
    for i in range(0, len(data), MAX_FILE):
        p = dest.with_name(f"{dest.name}.part{i // MAX_FILE}")
        p.write_bytes(data[i : i + MAX_FILE])
        parts.append(p)
    dest.unlink()
    return parts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--dry", action="store_true", help="CPU and gloo, tiny models: check the plumbing")
    ap.add_argument("--only", action="append", help="run ids to run (repeatable)")
    ap.add_argument("--budget", type=float, default=float(os.environ.get("HEADROOM_DISTRIBUTED_BUDGET", 560)))
    ap.add_argument("--run", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        return run_one(args.run)
    if not args.out:
        ap.error("OUT is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / ".work"
    work.mkdir(exist_ok=True)
    log = open(out / "distributed.log", "w")
    t0 = time.time()
    env = dict(
        os.environ,
        PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep),
        NCCL_NVLS_ENABLE="0",
        TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
        NVSHMEM_DISABLE_NVLS="1",
        TOKENIZERS_PARALLELISM="false",
    )
    device = "cpu" if args.dry else "cuda"
    steps = {"steps": 1, "warmup": 1, "timed_steps": 1} if args.dry else {}
    results: dict = {
        "device": "CPU (gloo), dry run" if args.dry else "2 GPUs (NCCL)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "scenario": SCENARIO,
        "runs": {},
    }
    sys.path.insert(0, str(ROOT))
    run_dirs: list[Path] = []
    for run_id, workload, options, single, limit in GPU_RUNS:
        if args.only and run_id not in args.only:
            continue
        opts = dict(options, **(DRY_OPTIONS[run_id] if args.dry else {}))
        flags = " ".join(f"--{k} {v}" for k, v in opts.items())
        command = f"headroom profile {workload} --nproc 2 {flags}".strip() + (" --device cpu" if args.dry else "")
        entry = {"command": command, "status": "skipped"}
        results["runs"][run_id] = entry
        left = args.budget - (time.time() - t0)
        if left < 30:
            entry["status"] = f"skipped: {left:.0f} s of the budget left"
            continue
        result_file = work / f"{run_id}.json"
        req = {
            "workload": workload,
            "options": opts,
            "device": device,
            "out": str(work / run_id),
            "command": command,
            "result": str(result_file),
            "steps": steps,
        }
        print(f"== {run_id}: {command}", file=log, flush=True)
        start = time.time()
        p = subprocess.Popen(
            [sys.executable, __file__, "--run", json.dumps(req)],
            stdout=log,
            stderr=log,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        try:
            code = p.wait(timeout=min(limit, left))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
            code = None
        entry["wall_s"] = round(time.time() - start, 1)
        if code != 0 or not result_file.exists():
            entry["status"] = "timed out" if code is None else f"failed (exit {code}; see distributed.log)"
            continue
        run_dir = Path(json.loads(result_file.read_text())["out_dir"])
        entry["status"] = "ok"
        try:
            entry["analysis"] = summarise(run_dir, ROOT / "traces" / single if single else None)
        except Exception as e:  # the traces are kept; say what failed
            entry["status"] = f"analysis failed: {type(e).__name__}: {e}"
        run_dirs.append(run_dir)
        print(f"   {run_id}: {entry['status']} in {entry['wall_s']} s", file=log, flush=True)
    if run_dirs:
        parts = tar_runs(run_dirs, out / "ranks.tar")
        results["tar"] = [p.name for p in parts]
        if len(parts) > 5:  # 3 more files below: at most 8
            results["tar_warning"] = f"{len(parts)} parts: more than 8 files in all"
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (out / "report.md").write_text(report_md(results))
    log.close()
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    files = sorted(p.name for p in out.iterdir())
    print(f"wrote {', '.join(files)} in {time.time() - t0:.0f} s")
    return 0 if all(r["status"] == "ok" for r in results["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
