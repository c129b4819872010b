#!/usr/bin/env python3
"""The loop on the H200, one command: for each substitution, extract the problem at the real shapes ->
verify the candidate on it -> project the verified speedup -> validate (swap it in, measure, profile).

    OUT=$OUT python3 scripts/gpu_validate.py              # on the GPU machine, from the repository root
    python3 scripts/gpu_validate.py --device cpu --out /tmp/loop   # the same pipeline on a CPU, tiny models

Every step is the `headroom` command a user would run (`python -m headroom.cli ...`), so the
run proves the CLI, not a private path. A time budget (default 510 s) is checked before each
substitution: one that would not finish is skipped and recorded as skipped. On a GPU, the
variant trace of each Triton candidate must contain its kernels (`GPU_KERNELS` in the
candidate file), or the substitution is marked failed: the GPU path, not the torch fallback,
is what was measured.

Writes under --out (default $OUT), at most 8 files:
  validation.json       the `headroom validate --json` objects, a list (-> docs/gpu/validation.json)
  loop.json             per substitution: the extract summary, the verify verdict and speedup, the
                        projection from the verified speedup, the GPU-kernel check, durations, skips
  gpu_validate.log      everything the commands printed
  runs-<k>.tar.gz       k = 1..5, one per substitution (the fifth holds the rest): each run's validate
                        directory (run.json, result.json, base/variant traces) as <name>/, and under
                        <name>/loop/ the extracted problem, its entry and trace, and verify.json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CAND = REPO / "examples" / "substitutions"


# name, workload, extra workload options, module class, candidate, estimated seconds on the H200
SUBSTITUTIONS = [
    ("llama7b-prefill-rmsnorm", "llama-7b", [], "LlamaRMSNorm", "llama_rmsnorm.py", 85),
    ("llama7b-prefill-rmsnorm-checked", "llama-7b", [], "LlamaRMSNorm", "llama_rmsnorm_checked.py", 80),
    ("llama7b-prefill-rmsnorm-fp64", "llama-7b", [], "LlamaRMSNorm", "llama_rmsnorm_fp64.py", 80),
    ("llama7b-decode-bs1-rmsnorm", "llama-7b", ["--phase", "decode", "--batch", "1"], "LlamaRMSNorm",
     "llama_rmsnorm.py", 70),
    ("bert-layernorm", "bert-base", [], "LayerNorm", "layernorm_fused.py", 55),
    ("gpt2xl-decode-bs1-gelu", "gpt2-xl", ["--phase", "decode", "--batch", "1"], "NewGELUActivation",
     "gpt2_gelu_tanh.py", 60),
    ("dlrm-train-interaction", "dlrm", [], "InteractionArch", "dlrm_interaction.py", 80),
    ("gpt2xl-prefill-gelu", "gpt2-xl", [], "NewGELUActivation", "gpt2_gelu_tanh.py", 75),
    ("llama7b-prefill-swiglu", "llama-7b", [], "LlamaMLP", "llama_swiglu_mlp.py", 100),
]
TRAINING = {"dlrm", "dlrm-dcn", "resnet-50"}
MAX_ARCHIVES = 5   # + validation.json, loop.json and the log: 8 files
SLOW = ("fp64",)    # a candidate expected to be slower (verify conclusive below 1, a projected slowdown)


class Log:
    def __init__(self, path: Path):
        self.f = open(path, "a", buffering=1)

    def __call__(self, text: str) -> None:
        print(text, flush=True)
        self.f.write(text + "\n")


def headroom(args: list[str], log: Log, timeout: float) -> tuple[int, str, float]:
    """Run `headroom ARGS` (this interpreter), log its stderr, return (status, stdout, seconds)."""
    cmd = [sys.executable, "-m", "headroom.cli", *args]
    log(f"$ headroom {' '.join(shlex.quote(a) for a in args)}")
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"  timed out after {timeout:.0f} s")
        return 124, "", time.monotonic() - t0
    for line in p.stderr.splitlines():
        if "USDT:" in line:   # Kineto's start/stop chatter
            continue
        log(f"  {line}")
    dt = time.monotonic() - t0
    log(f"  -> exit {p.returncode} in {dt:.1f} s")
    return p.returncode, p.stdout, dt


def parse_json(out: str) -> dict:
    """A command's --json output: the whole of stdout, else its last line (library chatter before it)."""
    text = out.strip()
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return {}


def gpu_kernels(candidate: Path) -> tuple[str, ...]:
    tree = ast.parse(candidate.read_text())
    for node in tree.body:
        names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if isinstance(node, ast.Assign) and "GPU_KERNELS" in names:
            return tuple(ast.literal_eval(node.value))
    return ()


def training_candidate(candidate: Path, dest: Path) -> Path:
    """A training problem's form of a module candidate (forward + backward), for `headroom verify`."""
    dest.write_text(
        '"""Forward + backward form of {name} for a problem extracted from a training workload."""\n'
        "import importlib.util\n\n"
        "from headroom.extract.autograd import with_backward\n\n"
        f"_spec = importlib.util.spec_from_file_location('_candidate', {str((REPO / candidate).resolve())!r})\n"
        "_mod = importlib.util.module_from_spec(_spec)\n"
        "_spec.loader.exec_module(_mod)\n\n\n"
        "class ModelNew(with_backward(_mod.ModelNew)):\n"
        "    pass\n".replace("{name}", candidate.name))
    return dest


def one(name, workload, opts, module, cand_name, work: Path, device: str, log: Log, deadline: float) -> dict:
    cand = (CAND / cand_name).relative_to(REPO)      # relative: the commands run in REPO, the results name it so
    rec: dict = {"name": name, "workload": workload, "options": opts, "module": module,
                 "candidate": str(cand), "device": device, "steps": {}}
    dev = ["--device", device]
    tiny = ["--flavour", "tiny"] if device == "cpu" else []
    wl = [workload, *opts, *tiny, *dev]
    # 1. extract
    def left() -> float:
        return max(deadline - time.monotonic(), 5.0)

    rc, out, dt = headroom(["extract", *wl, "--module", module, "--out", str(work / "problem"), "--json"], log, left())
    rec["steps"]["extract_s"] = round(dt, 1)
    if rc != 0:
        rec["status"] = f"extract failed (exit {rc})"
        return rec
    ex = parse_json(out)
    rec["extract"] = {k: ex.get(k) for k in ("name", "selectors", "share", "calls_per_step", "instances")}
    problem, entry = Path(ex["problem"]), Path(ex["entry"])
    # 2. verify (a training problem verifies forward + backward)
    vcand = training_candidate(cand, work / "candidate_train.py") if workload in TRAINING else cand
    vjson = work / "verify.json"
    rc, out, dt = headroom(["verify", str(problem), str(vcand), "--json", *(dev if device == "cpu" else [])],
                           log, left())
    rec["steps"]["verify_s"] = round(dt, 1)
    v = parse_json(out)
    vjson.write_text(json.dumps(v, indent=1) + "\n")
    rec["verify"] = {k: v.get(k) for k in ("verdict", "speedup", "speedup_fp32", "launches_per_call", "reason")
                     if k in v}
    rec["verify"]["failed_checks"] = [c["name"] for c in v.get("checks", []) if not c.get("passed")]
    t = v.get("timing") or {}
    rec["verify"].update({k: t.get(k) for k in ("clock", "candidate_clock", "rounds", "rounds_stop",
                                                 "iters_per_phase", "overhead_share", "speedup_ci")})
    rec["verify"]["per_call"] = v.get("per_call")
    rec["verify"]["elapsed_s"] = v.get("elapsed_s")
    # 3. validate
    run_dir = work / "run"
    budget = left()
    rc, out, dt = headroom(["validate", *wl, "--replace", f"{module}={cand}", "--out", str(run_dir), "--json",
                            "--timeout", str(int(budget))], log, budget + 15)
    rec["steps"]["validate_s"] = round(dt, 1)
    if rc != 0:
        rec["status"] = f"validate failed (exit {rc})"
        return rec
    result = parse_json(out)
    rec["validate"] = result
    part = (result.get("part") or {}).get("speedup")
    vs = v.get("speedup") or (v.get("timing") or {}).get("speedup_estimate")
    rec["in_model"] = {"part_speedup": part, "verify_speedup": vs,
                       "ratio": vs / part if part and vs else None}
    # 4. the verified speedup, projected on the base trace (verify -> project)
    if v.get("verdict") == "pass":
        rc, out, dt = headroom(["project", str(run_dir / "base.json.gz"), "--problems", str(entry),
                                "--speedups", str(vjson), "--json"], log, left())
        rec["steps"]["project_s"] = round(dt, 1)
        if rc == 0:
            pj = parse_json(out)
            proj = {p["method"]: p["speedup"] for p in pj.get("projections", []) if p.get("scenario") == "speedups"}
            est = pj.get("estimate") or {}
            measured = (result.get("measured") or {}).get("speedup")
            rec["project_from_verify"] = {"amdahl": proj.get("amdahl"), "replay": proj.get("replay"),
                                          "estimate": est.get("speedup"), "low": est.get("low"),
                                          "high": est.get("high"), "measured": measured,
                                          "error": est["speedup"] / measured - 1 if est.get("speedup") and measured
                                          else None, "entries": pj.get("entries"),
                                          "selected_us": pj.get("selected_us"), "warnings": pj.get("warnings")}
    # 5. the GPU path ran (Triton kernels in the variant trace's part)
    want = gpu_kernels(REPO / cand)
    seen = [k[0] for k in (result.get("detail", {}).get("part_kernels", {}).get("variant") or [])]
    found = {w: any(w in s for s in seen) for w in want}
    rec["gpu_kernels"] = {"expected": list(want), "found": found, "variant_part_kernels": seen}
    if device != "cpu" and want and not all(found.values()):
        rec["status"] = f"FAILED: the variant ran without its GPU kernels {want} (saw {seen[:4]})"
        return rec
    rec["status"] = "ok"
    return rec


def archive(work: Path, out: Path, slot: int) -> str:
    """Add one substitution to archive `runs-<slot>.tar.gz` (rewritten whole, so a run cut short keeps
    what finished): `<name>/` holds the validate run (run.json, result.json, base/variant traces:
    `tar xzf runs-<slot>.tar.gz -C docs/gpu/validation`), `<name>/loop/` the extracted problem, its
    entry and trace, and verify.json."""
    name = work.name
    stage = out / ".staging" / str(slot) / name
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    if (work / "run").is_dir():
        for f in (work / "run").iterdir():
            shutil.move(str(f), stage / f.name)
    extras = [f for f in work.iterdir() if f.name != "run"]
    if extras:
        (stage / "loop").mkdir()
        for f in extras:
            shutil.move(str(f), stage / "loop" / f.name)
    path = out / f"runs-{slot}.tar.gz"
    tmp = path.with_name(f".{path.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for d in sorted((out / ".staging" / str(slot)).iterdir()):
            tar.add(d, arcname=d.name)
    os.replace(tmp, path)
    return path.name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out/gpu_validate"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget", type=float, default=510.0, help="seconds for the whole run")
    ap.add_argument("--only", nargs="*", help="substitution names to run")
    args = ap.parse_args()
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(REPO) + (os.pathsep + old if old else "")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")        # one-rank NCCL group for torchrec DMP: no NVLink multicast
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work_root = out / "work"
    work_root.mkdir(exist_ok=True)
    log = Log(out / "gpu_validate.log")
    t_start = time.monotonic()
    subs = [s for s in SUBSTITUTIONS if not args.only or s[0] in args.only]
    records, results = [], []
    for name, workload, opts, module, cand, est in subs:
        left = args.budget - (time.monotonic() - t_start)
        if left < est:
            log(f"== {name}: skipped ({left:.0f} s left of the budget, needs ~{est} s)")
            records.append({"name": name, "status": f"skipped: {left:.0f} s left, ~{est} s needed"})
            continue
        log(f"== {name} ({left:.0f} s left)")
        t0 = time.monotonic()
        work = work_root / name
        work.mkdir(exist_ok=True)
        try:
            rec = one(name, workload, opts, module, cand, work, args.device, log,
                      deadline=time.monotonic() + min(left, 300.0))
        except Exception as e:  # noqa: BLE001 - one substitution must not stop the others
            rec = {"name": name, "status": f"script error: {type(e).__name__}: {e}"}
        rec["seconds"] = round(time.monotonic() - t0, 1)
        rec["archive"] = archive(work, out, slot=min(len(records), MAX_ARCHIVES - 1) + 1)
        shutil.rmtree(work, ignore_errors=True)
        log(f"== {name}: {rec['status']} in {rec['seconds']} s")
        if "validate" in rec:
            results.append(rec["validate"])
        records.append(rec)
        (out / "validation.json").write_text(json.dumps(results, indent=1) + "\n")
        (out / "loop.json").write_text(json.dumps({"device": args.device, "records": records}, indent=1) + "\n")
    shutil.rmtree(work_root, ignore_errors=True)
    shutil.rmtree(out / ".staging", ignore_errors=True)
    total = time.monotonic() - t_start
    files = sorted({r["archive"] for r in records if r.get("archive")})
    (out / "loop.json").write_text(json.dumps({"device": args.device, "seconds": round(total, 1),
                                               "archives": files, "records": records}, indent=1) + "\n")
    log(f"done in {total:.0f} s: {sum(r.get('status') == 'ok' for r in records)} of {len(records)} ok; "
        f"files: validation.json, loop.json, gpu_validate.log, {', '.join(files)}")
    return 0 if all(r.get("status") == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
