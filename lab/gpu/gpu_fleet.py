"""A KernelBench level-1 campaign twice on one GPU: in this process (the direct path) and through
`--engine ray` with one GPU actor, and their verdicts compared problem by problem.

    python3 lab/gpu/gpu_fleet.py --out $OUT                    # on the H200 (Ray from /var/tmp/ray, ~200 s)
    python3 lab/gpu/gpu_fleet.py --out /tmp/fl --dry-run       # on a CPU: 3 problems, small shapes, 1 "GPU"
    python3 lab/gpu/gpu_fleet.py --check docs/gpu/fleet/kernelbench_ray.json   # exit 1 if verdicts differ
    python3 lab/gpu/gpu_fleet.py --render docs/gpu/fleet/kernelbench_ray.json  # Markdown for docs/fleet.md

Ray travels to the GPU machine as pieces (`.ray-partNN/`, copied into --parts, default /var/tmp/ray): the
unpacked ray wheel as an xz tarball split in two, and the wheels of jsonschema, referencing, rpds-py and
jsonschema-specifications, all named in SHA256SUMS. Step 1 checks every piece's sha256, joins the tarball,
checks it and unpacks it with the wheels into --site (default /var/tmp/raysite; done once: a second run
finds it). Step 2: the problems in this process, one after the other (`verify_suite`, no `run_pairs`), each
with KernelBench's reference as its candidate and the all-zeros cheat (tests/cheaters/kernelbench/), until
--direct-share of the budget is spent. Step 3: the same problems through the Ray path (`pool_runner` over a
`RayEngine` on a local cluster of one GPU; the stream OUT/ray.jsonl), stopped at the budget. Both runs use
one seed, so the checks see the same inputs.

Writes OUT/kernelbench_ray.json (the comparison; after each step and at a stop), OUT/direct.json.gz and
OUT/ray.json.gz (the suite documents), OUT/ray.jsonl and OUT/gpu_fleet.log.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
GENERIC = REPO / "tests" / "cheaters" / "kernelbench"
CANDIDATES = {"reference": "pass", "zeros": "fail"}  # the kind and what it is expected to get
# Small and fast on the H200 (2.4-5.1 s a candidate in docs/gpu/measure/kernelbench_l1.*.json.gz).
PROBLEMS = ["4", "5", "12", "40", "42", "44", "47", "48", "52", "88", "95", "99"]
DRY_PROBLEMS = ["19", "23", "47"]
RAY_VERSION = "2.60.0"


def correct(verdict: str) -> bool:
    return verdict in ("pass", "inconclusive")


def install(parts: Path, site: Path, log) -> dict:
    """The pieces under `parts` checked and unpacked into `site`; what was done and how long it took."""
    t0 = time.monotonic()
    marker = site / ".headroom-ray"
    if marker.is_file() and (site / "ray" / "__init__.py").is_file():
        return {"site": str(site), "reused": True, "seconds": 0.0}
    sums = {}
    for line in (parts / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        sums[name] = digest
    pieces = sorted(n for n in sums if n.startswith("ray.tar.xz."))
    missing = [n for n in sums if n != "ray.tar.xz" and not (parts / n).is_file()]
    if missing:
        raise RuntimeError(f"{parts}: missing {', '.join(missing)} (copy every .ray-partNN/ there)")

    def sha(path: Path) -> str:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    bad = [n for n in sums if n != "ray.tar.xz" and sha(parts / n) != sums[n]]
    if bad:
        raise RuntimeError(f"sha256 differs: {', '.join(bad)}")
    joined = parts / "ray.tar.xz"
    with open(joined, "wb") as out:
        for n in pieces:
            with open(parts / n, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    if sha(joined) != sums["ray.tar.xz"]:
        raise RuntimeError(f"{joined}: sha256 differs after joining {len(pieces)} pieces")
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    subprocess.run(["tar", "-C", str(site), "-xJf", str(joined)], check=True)
    wheels = sorted(n for n in sums if n.endswith(".whl"))
    for n in wheels:
        with zipfile.ZipFile(parts / n) as z:
            for info in z.infolist():
                z.extract(info, site)
                mode = info.external_attr >> 16
                if mode:
                    os.chmod(site / info.filename, mode)
    joined.unlink()
    marker.write_text(RAY_VERSION + "\n")
    done = {
        "site": str(site),
        "reused": False,
        "pieces": pieces,
        "wheels": wheels,
        "seconds": round(time.monotonic() - t0, 1),
    }
    log(f"ray unpacked into {site} in {done['seconds']} s ({len(pieces)} pieces, {len(wheels)} wheels)")
    return done


def campaign(kb: Path, only: list[str], root: Path) -> tuple[Path, Path, list[str]]:
    """A suite of the chosen level-1 problems and, for each, its candidates: wrappers of the generic
    KernelBench candidates that name their problem (`HEADROOM_TEST_PROBLEM`) themselves, so one
    VerifyOptions serves the whole suite."""
    suite, cands = root / "suite", root / "candidates"
    suite.mkdir(parents=True)
    cands.mkdir()
    level1 = sorted((kb / "level1").glob("*.py"), key=lambda p: int(p.stem.split("_")[0]))
    chosen = [p for n in only for p in level1 if p.stem.split("_")[0] == n or p.stem == n]
    for p in chosen:
        shutil.copy(p, suite / p.name)
        sub = cands / p.stem
        sub.mkdir()
        for kind in CANDIDATES:
            body = (GENERIC / f"{kind}.py").read_text()
            (sub / f"{kind}.py").write_text(
                f"import os, sys\nos.environ['HEADROOM_TEST_PROBLEM'] = {str(suite / p.name)!r}\n"
                f"sys.path.insert(0, {str(GENERIC)!r})\n" + body
            )
    return suite, cands, [p.stem for p in chosen]


def row(r: dict) -> dict:
    return {
        "problem": r["problem"],
        "candidate": Path(r["candidate"]).stem,
        "verdict": r["verdict"],
        "speedup": r.get("speedup"),
        "elapsed_s": r.get("elapsed_s"),
        "failed": [c["name"] for c in r.get("checks", []) if not c["passed"]],
        "reason": (r.get("reason") or "")[:200] or None,
    }


def compare(direct: list[dict], ray: list[dict]) -> list[dict]:
    """One entry per candidate the direct path verified: its verdict on both paths (None: not reached)."""
    on_ray = {(r["problem"], r["candidate"]): r["verdict"] for r in ray}
    out = []
    for r in direct:
        v = on_ray.get((r["problem"], r["candidate"]))
        out.append(
            {
                "problem": r["problem"],
                "candidate": r["candidate"],
                "direct": r["verdict"],
                "ray": v,
                "same": v == r["verdict"],
                "same_class": v is not None and correct(v) == correct(r["verdict"]),
            }
        )
    return out


def check(doc: dict, min_problems: int = 1, strict: bool = True) -> list[str]:
    """What makes a comparison file wrong: a candidate missing on the Ray path, a verdict that differs, a
    cheat that passed, too few problems. `strict=False`: pass and inconclusive (a correct candidate whose
    timing did or did not call a speedup, which two runs on one GPU can differ in) count as one verdict."""
    bad = []
    rows = doc.get("compare", [])
    problems = {c["problem"] for c in rows}
    if len(problems) < min_problems:
        bad.append(f"{len(problems)} problems compared, expected at least {min_problems}")
    for c in rows:
        label = f"{c['problem']} <- {c['candidate']}"
        if c["ray"] is None:
            bad.append(f"{label}: not verified on the Ray path")
        elif c["direct"] != c["ray"] and (strict or not c["same_class"]):
            bad.append(f"{label}: {c['direct']} direct, {c['ray']} on Ray")
        if c["candidate"] == "zeros" and "pass" in (c["direct"], c["ray"]):
            bad.append(f"{label}: a cheat passed")
    if doc.get("errors"):
        bad.extend(f"error: {e.splitlines()[0][:160]}" for e in doc["errors"])
    return bad


def render(doc: dict) -> str:
    rows = doc.get("compare", [])
    same = sum(c["same"] for c in rows)
    lines = [
        f"{doc.get('device')}; torch {doc.get('torch')}; ray {doc.get('ray')}; {len(rows)} candidates of "
        f"{len({c['problem'] for c in rows})} problems; same verdict on both paths: {same} of {len(rows)}; "
        f"direct {doc.get('direct_wall_s')} s, Ray {doc.get('ray_wall_s')} s "
        f"({doc.get('ray_workers')}); whole run {doc.get('wall_s')} s.",
        "",
        "| problem | candidate | direct | Ray |",
        "|---|---|---|---|",
    ]
    for c in rows:
        lines.append(f"| {c['problem']} | {c['candidate']} | {c['direct']} | {c['ray'] or '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="directory for the results")
    ap.add_argument("--budget", type=float, default=270.0, help="seconds after which nothing new starts")
    ap.add_argument("--direct-share", type=float, default=0.4, help="part of the budget for the direct path")
    ap.add_argument("--parts", type=Path, default=Path("/var/tmp/ray"), help="the .ray-partNN/ files, together")
    ap.add_argument("--site", type=Path, default=Path("/var/tmp/raysite"), help="where Ray is unpacked")
    ap.add_argument("--kernelbench", help="KernelBench directory (default: $HEADROOM_KERNELBENCH, ../shared)")
    ap.add_argument("--only", nargs="*", help="level-1 problem numbers (default: 12 small ones)")
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="CPU, small shapes, 3 problems, the Ray of this environment, one declared GPU",
    )
    ap.add_argument("--check", metavar="RESULTS", help="exit 1 (and say why) unless every verdict agrees")
    ap.add_argument(
        "--by-class",
        action="store_true",
        help="with --check: pass and inconclusive count as one verdict (timing, not the path)",
    )
    ap.add_argument("--render", metavar="RESULTS", help="print the Markdown table of a results file and exit")
    args = ap.parse_args(argv)
    if args.render:
        print(render(json.loads(Path(args.render).read_text())))
        return 0
    if args.check:
        bad = check(json.loads(Path(args.check).read_text()), strict=not args.by_class)
        print("\n".join(bad) or "every verdict the same on both paths")
        return 1 if bad else 0
    if not args.out:
        ap.error("--out is required")
    return run(args)


def run(args: argparse.Namespace) -> int:
    import signal

    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "gpu_fleet.log", "w")
    lock = threading.Lock()

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - t0:6.1f}s] {msg}"
        with lock:
            print(line, flush=True)
            logf.write(line + "\n")
            logf.flush()

    def _terminate(signum, frame):
        raise SystemExit(124)

    signal.signal(signal.SIGTERM, _terminate)
    doc: dict = {
        "tool": "lab/gpu/gpu_fleet.py",
        "dry_run": args.dry_run,
        "budget_s": args.budget,
        "errors": [],
        "skipped": [],
        "direct": [],
        "ray_results": [],
        "compare": [],
    }

    def save() -> None:
        with lock:
            doc["wall_s"] = round(time.monotonic() - t0, 1)
            doc["compare"] = compare(doc["direct"], doc["ray_results"])
            tmp = out / "kernelbench_ray.json.tmp"
            tmp.write_text(json.dumps(doc, indent=1) + "\n")
            os.replace(tmp, out / "kernelbench_ray.json")

    # 1. Ray: unpacked from the pieces on the GPU machine; in a dry run, the pieces are checked and
    # unpacked when given (--parts), and the Ray of this environment is the one used.
    try:
        if not args.dry_run or (args.parts / "SHA256SUMS").is_file():
            doc["install"] = install(args.parts, args.site, log)
            if sys.version_info[:2] == (3, 12):
                sys.path.insert(0, str(args.site))
                # Ray's workers are this process's children: they find ray and headroom by PYTHONPATH.
                os.environ["PYTHONPATH"] = os.pathsep.join(
                    [str(args.site), str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
                )
    except Exception as e:
        doc["errors"].append(f"install: {type(e).__name__}: {e}")
        log(doc["errors"][-1])
    os.environ["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    )

    import torch
    from scripts.gpu_kernelbench import find_kernelbench

    from headroom.verify import VerifyOptions, verify_suite

    kb = find_kernelbench(args.kernelbench)
    device = "cpu" if args.dry_run else VerifyOptions(device="auto").resolved_device()
    doc["device"] = torch.cuda.get_device_name(0) if device != "cpu" else "cpu"
    doc["torch"] = torch.__version__
    root = Path(tempfile.mkdtemp(prefix="headroom-fleet-"))
    suite, cands, stems = campaign(kb, args.only or (DRY_PROBLEMS if args.dry_run else PROBLEMS), root)
    doc["problems"] = stems
    opts = VerifyOptions.quick(seed=1) if args.dry_run else VerifyOptions(device=device, seed=1)
    log(f"torch {torch.__version__}, device {doc['device']}, {len(stems)} problems, budget {args.budget:.0f} s")

    # At the budget, whatever is done is the answer: the direct results so far, the Ray stream's lines.
    def finish_from_stream() -> None:
        log(f"budget of {args.budget:.0f} s reached: the results so far")
        try:
            lines = (out / "ray.jsonl").read_text().splitlines() if (out / "ray.jsonl").is_file() else []
            doc["ray_results"] = [row(json.loads(x)) for x in lines if x.strip()]
        except Exception as e:
            doc["errors"].append(f"ray stream: {e}")
        doc["skipped"].append("stopped at the budget")
        if t_ray:
            doc["ray_wall_s"] = round(time.monotonic() - t_ray, 1)
        save()
        summary()
        os._exit(0)

    def summary() -> None:
        rows = doc["compare"]
        log(
            f"{sum(c['same'] for c in rows)} of {len(rows)} verdicts the same on both paths "
            f"({sum(c['same_class'] for c in rows)} the same class); errors {len(doc['errors'])}; "
            f"wall {time.monotonic() - t0:.1f} s -> {out / 'kernelbench_ray.json'}"
        )
        for c in rows:
            if not c["same"]:
                log(f"  differs: {c['problem']} <- {c['candidate']}: {c['direct']} direct, {c['ray']} Ray")

    t_ray = 0.0
    watchdog = threading.Timer(max(args.budget - (time.monotonic() - t0), 1.0), finish_from_stream)
    watchdog.daemon = True
    watchdog.start()

    # 2. The direct path, problem by problem, until its share of the budget is spent.
    t_direct = time.monotonic()
    full: list = []
    done: list[str] = []
    for stem in stems:
        if time.monotonic() - t0 > args.budget * args.direct_share:
            doc["skipped"].append(f"direct:{stem}")
            continue
        try:
            part = verify_suite(suite, cands, opts, problems=[stem])
            full.extend(part["results"])
            doc["direct"].extend(row(r) for r in part["results"])
            done.append(stem)
            for r in part["results"]:
                log(f"direct {stem} <- {Path(r['candidate']).stem}: {r['verdict']} ({r['elapsed_s']} s)")
        except Exception as e:
            doc["errors"].append(f"direct {stem}: {type(e).__name__}: {e}")
            log(traceback.format_exc(limit=4))
        doc["direct_wall_s"] = round(time.monotonic() - t_direct, 1)
        save()
    with gzip.open(out / "direct.json.gz", "wt") as f:
        json.dump({"results": full}, f)

    # 3. The same problems through the Ray path.
    t_ray = time.monotonic()
    if done and t_ray - t0 < args.budget:
        try:
            import ray

            tmp = Path(tempfile.gettempdir() if args.dry_run else "/var/tmp") / "headroom-ray"
            tmp.mkdir(parents=True, exist_ok=True)
            ray.init(
                num_cpus=2 if args.dry_run else 4,
                num_gpus=1,
                include_dashboard=False,
                log_to_driver=False,
                object_store_memory=int(3e8 if args.dry_run else 2e9),
                _temp_dir=str(tmp),
            )
            doc["ray"] = ray.__version__
            from headroom.fleet import get_engine
            from headroom.fleet.verify import pool_runner

            engine = get_engine("ray")
            n_workers, each = engine.workers()
            doc["ray_workers"] = f"{n_workers} worker(s), {each} each"
            log(f"ray {ray.__version__} from {Path(ray.__file__).parent}: {doc['ray_workers']}")
            res = verify_suite(
                suite,
                cands,
                opts,
                out=out / "ray.json",
                problems=done,
                run_pairs=pool_runner(engine, stream_to=out / "ray.json"),
                progress=lambda s: log("ray " + s),
            )
            doc["ray_results"] = [row(r) for r in res["results"]]
            with gzip.open(out / "ray.json.gz", "wt") as f:
                json.dump(res, f)
            (out / "ray.json").unlink()
        except Exception as e:
            doc["errors"].append(f"ray: {type(e).__name__}: {e}")
            log(traceback.format_exc(limit=6))
        doc["ray_wall_s"] = round(time.monotonic() - t_ray, 1)
    else:
        doc["skipped"].append("ray: no time left or no direct results")
    watchdog.cancel()
    save()
    summary()
    shutil.rmtree(root, ignore_errors=True)
    logf.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
