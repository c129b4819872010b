"""Capture the shipped traces and the GPU proofs on one GPU (the H200), in one command.

    OUT=/path/for/results bash scripts/gpu_capture.sh     (sets PYTHONPATH, NCCL and tokenizer flags)
    python3 scripts/gpu_capture.py OUT [BUDGET_S]         (the same, with the environment already set)

Each run is a child process (`gpu_capture.py --run ARGS`) with a time limit; see the shell wrapper's
comment for what is run and written.
"""

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE = 15 * 2**20
# Set by main(): the log, the start time and the work folders.
LOG = T0 = WORK = SHIP = CHECKS = OUT = None


def runs(SHIP, CHECKS):
    """(id, workload, options, where, time limit s, minimum time worth starting with)."""
    return [
        ("llama-7b", "llama-7b", {}, SHIP, 150, 40),
        ("llama-7b-layers4", "llama-7b", {"layers": 4}, CHECKS, 90, 30),
        ("gpt2-xl", "gpt2-xl", {}, SHIP, 120, 30),
        ("bert-base", "bert-base", {}, SHIP, 90, 25),
        ("vit-b-16", "vit-b-16", {}, SHIP, 90, 25),
        ("resnet-50", "resnet-50", {}, SHIP, 120, 30),
        ("dlrm", "dlrm", {}, SHIP, 180, 45),
        ("dlrm-dcn", "dlrm-dcn", {}, SHIP, 180, 45),
        ("llama-7b-decode", "llama-7b", {"phase": "decode"}, SHIP, 120, 30),
        ("llama-7b-compile", "llama-7b", {"compile": True}, SHIP, 300, 120),
        ("llama-7b-decode-layers4", "llama-7b", {"phase": "decode", "layers": 4}, CHECKS, 90, 30),
        ("llama-7b-decode-dynamic", "llama-7b", {"phase": "decode", "kv_cache": "dynamic"}, SHIP, 120, 40),
    ]


def run_one(arg: str) -> int:
    """One profile run (in its own process, so a crash or hang never stops the rest)."""
    t0 = time.time()
    from headroom.errors import UserError
    from headroom.profile.run import profile_workload
    from headroom.profile.workload import Options
    a = json.loads(arg)
    try:
        r = profile_workload(a["workload"], Options(**a["options"]), out=a["out"], command=a["command"])
    except UserError as e:
        print(f"headroom: error: {e}", file=sys.stderr)
        return 2
    d = r.to_dict()
    d["wall_s"] = time.time() - t0
    json.dump(d, open(a["result"], "w"), default=str)
    an = r.analysis
    print(f"HEADROOM-RESULT {a['workload']}: step {r.timed.median_ms:.2f} ms, overhead {100 * r.overhead:+.1f}%, "
          f"idle {100 * an.idle_fraction:.1f}%, addressable {100 * an.addressable_fraction:.1f}%, "
          f"{an.mode}, trace {r.trace_path.name}")
    return 0


def log(msg):
    print(msg, flush=True)
    LOG.write(msg + "\n")
    LOG.flush()


def elapsed():
    return time.monotonic() - T0


def command_line(workload, opts):
    flags = []
    for k, v in opts.items():
        if v is True:
            flags.append(f"--{k.replace('_', '-')}")
        else:
            flags.append(f"--{k.replace('_', '-')} {v}")
    return " ".join(["headroom profile", workload, *flags])


def env_info():
    info = {}
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:
        info["nvidia_smi"] = f"unavailable: {e}"
    probe = ("import json, importlib.metadata as m, torch\n"
             "v = {}\n"
             "for p in ('torch','transformers','torchrec','fbgemm-gpu','fbgemm-gpu-cpu','msgspec','nvtx','pandas'):\n"
             "    try: v[p] = m.version(p)\n"
             "    except Exception: v[p] = None\n"
             "v['cuda'] = torch.version.cuda; v['cuda_available'] = torch.cuda.is_available()\n"
             "try:\n"
             "    import headroom.workloads.dlrm as d; v['fbgemm_cuda'] = d.fbgemm_cuda_status()\n"
             "except Exception as e: v['fbgemm_cuda'] = repr(e)\n"
             "print(json.dumps(v))\n")
    try:
        p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
        info["packages"] = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else p.stderr[-2000:]
    except Exception as e:
        info["packages"] = f"probe failed: {e}"
    return info


def summarize(d):
    an, tm = d["analysis"], d["timing"]
    m = d["manifest"]
    out = {
        "trace": Path(d["trace"]).name,
        "variant": m.get("variant"),
        "batch": m.get("batch"), "seq": m.get("seq"), "dtype": m.get("dtype"),
        "step_ms": tm["timed"]["median_ms"], "step_ms_min": tm["timed"]["min_ms"], "step_ms_max": tm["timed"]["max_ms"],
        "profiled_step_ms": tm["profiled"]["median_ms"], "overhead": tm["overhead"],
        "trace_step_ms": an["step_us"] / 1000, "idle_fraction": an["idle_fraction"],
        "addressable_fraction": an["addressable_fraction"], "mode": an["mode"],
        "categories": {c["name"]: c["fraction"] for c in an["categories"]},
        "peak_memory_gb": m.get("peak_memory_gb"), "params": m.get("params"),
        "info": m.get("info"), "gpu": m.get("gpu"), "wall_s": d.get("wall_s"),
    }
    if d.get("layers"):
        L = d["layers"]
        out["layers"] = {k: L[k] for k in ("built_layers", "total_layers", "block_share", "step_us",
                                           "step_us_extrapolated", "timed_step_ms_extrapolated",
                                           "addressable_fraction", "idle_fraction")}
        out["layers"]["categories"] = {c["name"]: c["fraction"] for c in L["categories"]}
    return out


def layers_check(full, part):
    """Extrapolated (4 of 32 blocks) vs measured (32 blocks) category fractions, in percentage points."""
    if not full or not part or not part.get("layers"):
        return None
    meas = full["categories"]
    ext = part["layers"]["categories"]
    names = sorted(set(meas) | set(ext), key=lambda n: -meas.get(n, 0.0))
    rows = {n: {"full_32": round(100 * meas.get(n, 0.0), 3), "extrapolated_from_4": round(100 * ext.get(n, 0.0), 3),
                "diff_pp": round(100 * (ext.get(n, 0.0) - meas.get(n, 0.0)), 3)} for n in names}
    worst = max((abs(r["diff_pp"]) for r in rows.values()), default=0.0)
    L = part["layers"]
    return {
        "max_abs_diff_pp": worst, "within_1pp": worst <= 1.0, "categories": rows,
        "addressable_full": full["addressable_fraction"], "addressable_extrapolated": L["addressable_fraction"],
        "step_ms_full": full["step_ms"], "step_ms_extrapolated": L["timed_step_ms_extrapolated"],
        "step_ms_4_layers": part["step_ms"], "block_share_4_layers": L["block_share"],
    }


def pack(results, files_out):
    """Shipped traces (+ manifest.json) into tars of at most 15 MB; checks into one tar."""
    ship = sorted(SHIP.glob("*.json.gz"))
    big = [f.name for f in ship + sorted(CHECKS.glob("*.json.gz")) if f.stat().st_size > 16 * 2**20]
    results["trace_sizes_mb"] = {f.name: round(f.stat().st_size / 2**20, 2)
                                 for f in ship + sorted(CHECKS.glob("*.json.gz"))}
    results["over_16mb"] = big
    groups, cur, size = [], [], 0
    for f in ship:
        s = f.stat().st_size
        if cur and size + s > MAX_FILE:
            groups.append(cur)
            cur, size = [], 0
        cur.append(f)
        size += s
    if cur:
        groups.append(cur)
    groups = groups[:5]
    for i, g in enumerate(groups, 1):
        name = OUT / f"traces-{i}.tar"
        with tarfile.open(name, "w") as tar:
            for f in g:
                tar.add(f, arcname=f"traces/{f.name}")
            if i == 1 and (SHIP / "manifest.json").exists():
                tar.add(SHIP / "manifest.json", arcname="traces/manifest.json")
        files_out.append(name.name)
    checks = sorted(CHECKS.glob("*.json.gz"))
    if checks and sum(f.stat().st_size for f in checks) < MAX_FILE:
        with tarfile.open(OUT / "checks.tar", "w") as tar:
            for f in checks:
                tar.add(f, arcname=f"checks/{f.name}")
            if (CHECKS / "manifest.json").exists():
                tar.add(CHECKS / "manifest.json", arcname="checks/manifest.json")
        files_out.append("checks.tar")


def main(out: Path, budget: float) -> None:
    global LOG, T0, WORK, SHIP, CHECKS, OUT

    OUT, BUDGET = out, budget
    T0 = time.monotonic()
    WORK = Path(tempfile.mkdtemp(prefix="headroom-capture-"))
    SHIP, CHECKS, RESULTS = WORK / "traces", WORK / "checks", WORK / "results"
    for d in (SHIP, CHECKS, RESULTS):
        d.mkdir()
    LOG = open(WORK / "capture.log", "w")

    RUNS = runs(SHIP, CHECKS)

    log(f"headroom GPU capture: budget {BUDGET:.0f} s, work dir {WORK}")
    env = env_info()
    log(f"environment: {json.dumps(env)}")
    results = {"budget_s": BUDGET, "environment": env, "runs": {}}

    for run_id, workload, opts, where, limit, minimum in RUNS:
        left = BUDGET - elapsed() - 15          # keep time to pack
        if left < minimum:
            results["runs"][run_id] = {"status": "skipped", "reason": f"{left:.0f} s left of the budget"}
            log(f"--- {run_id}: skipped ({left:.0f} s left)")
            continue
        limit = min(limit, left)
        cmd = command_line(workload, opts)
        res = RESULTS / f"{run_id}.json"
        arg = json.dumps({"workload": workload, "options": opts, "out": str(where), "result": str(res), "command": cmd})
        log(f"--- {run_id}: {cmd}  (limit {limit:.0f} s, {elapsed():.0f} s elapsed)")
        t = time.monotonic()
        try:
            p = subprocess.run([sys.executable, __file__, "--run", arg], cwd=ROOT, capture_output=True, text=True,
                               timeout=limit)
            rc, output = p.returncode, (p.stdout or "") + (p.stderr or "")
        except subprocess.TimeoutExpired as e:
            rc = "timeout"
            output = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")) + \
                     ((e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or ""))
        wall = time.monotonic() - t
        lines = [l for l in output.splitlines() if not l.startswith("USDT")]
        LOG.write("\n".join(lines[-400:]) + "\n")
        entry = {"command": cmd, "rc": rc, "wall_s": round(wall, 1)}
        summary = None
        if rc == 0 and res.exists():
            try:
                summary = summarize(json.loads(res.read_text()))
            except Exception as e:
                lines.append(f"could not read the result: {type(e).__name__}: {e}")
        if summary is not None:
            entry.update(status="ok", **summary)
            said = [l for l in lines if l.startswith("HEADROOM-RESULT ")]
            log(f"    ok in {wall:.0f} s: {said[-1][len('HEADROOM-RESULT '):] if said else ''}")
        else:
            if rc == "timeout":
                lines.append(f"timed out after {limit:.0f} s")
            entry.update(status="timeout" if rc == "timeout" else "failed", error_tail=lines[-15:])
            errs = [l for l in lines if "error" in l.lower()] or lines
            log(f"    FAILED ({rc}) in {wall:.0f} s: {errs[-1] if errs else ''}")
        results["runs"][run_id] = entry

    R = results["runs"]
    ok = lambda k: R.get(k) if R.get(k, {}).get("status") == "ok" else None
    results["layers_check"] = {
        "prefill": layers_check(ok("llama-7b"), ok("llama-7b-layers4")),
        "decode": layers_check(ok("llama-7b-decode"), ok("llama-7b-decode-layers4")),
    }
    results["profiler_overhead"] = {k: v.get("overhead") for k, v in R.items() if v.get("status") == "ok"}

    # Pack: shipped traces (+ manifest.json) into tars of at most 15 MB; checks into one tar.
    files_out = []
    try:
        pack(results, files_out)
    except Exception as e:
        results["pack_error"] = f"{type(e).__name__}: {e}"
    results["files"] = files_out
    results["elapsed_s"] = round(elapsed(), 1)
    (OUT / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")

    # Summary.
    log("")
    log(f"{'run':<26} {'status':<8} {'step ms':>9} {'overhead':>9} {'idle':>6} {'addr.':>6}  embeddings / note")
    for k, v in R.items():
        if v.get("status") == "ok":
            emb = (v.get("info") or {}).get("embedding_path", "")
            log(f"{k:<26} {'ok':<8} {v['step_ms']:>9.2f} {100 * v['overhead']:>+8.1f}% {100 * v['idle_fraction']:>5.1f}%"
                f" {100 * v['addressable_fraction']:>5.1f}%  {emb[:60]}")
        else:
            log(f"{k:<26} {v.get('status'):<8} {v.get('reason') or (v.get('error_tail') or [''])[-1][:90]}")
    for phase, chk in results["layers_check"].items():
        if chk:
            log(f"--layers 4 vs 32 ({phase}): max |diff| {chk['max_abs_diff_pp']:.2f} pp "
                f"({'within' if chk['within_1pp'] else 'NOT within'} 1 pp); step {chk['step_ms_extrapolated']:.2f} ms "
                f"extrapolated vs {chk['step_ms_full']:.2f} ms measured")
        else:
            log(f"--layers 4 vs 32 ({phase}): not available")
    if results.get("over_16mb"):
        log(f"traces over 16 MB: {results['over_16mb']}")
    log(f"wrote {', '.join(files_out + ['results.json', 'capture.log'])} to {OUT} in {elapsed():.0f} s")
    LOG.close()
    shutil.copy(WORK / "capture.log", OUT / "capture.log")
    if (OUT / "capture.log").stat().st_size > MAX_FILE:
        with open(OUT / "capture.log", "r+b") as f:
            f.truncate(MAX_FILE)
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        sys.exit(run_one(sys.argv[2]))
    main(Path(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 530.0)
