#!/usr/bin/env python3
"""The loop on the H200, one command: for each substitution, extract the problem at the real shapes ->
verify the candidate on it -> project the verified speedup -> validate (swap it in, measure, profile).

    OUT=$OUT python3 lab/gpu/gpu_validate.py              # on the GPU machine, from the repository root
    python3 lab/gpu/gpu_validate.py --device cpu --out /tmp/loop   # the same pipeline on a CPU, tiny models

Every step is the `headroom` command a user would run (`python -m headroom.cli ...`), so the
run proves the CLI, not a private path. A time budget (default 510 s) is checked before each
substitution: one that would not finish is skipped and recorded as skipped. On a GPU, the
variant trace of each Triton candidate must contain its kernels (`GPU_KERNELS` in the
candidate file), or the substitution is marked failed: the GPU path, not the torch fallback,
is what was measured.

    OUT=$OUT python3 lab/gpu/gpu_validate.py --apriori --only NAMES   # the a-priori step only (see below)

`--apriori` reruns, for the named rows of docs/gpu/apriori/, only what the a-priori estimate needs:
extract -> verify -> project onto the committed base trace, against the committed measurement (no
validate: ~45-60 s a row instead of ~90). `--l2-probe` adds, per row, the reference and the candidate
timed in this process with CUDA events around the forward only, with the input in four states: cold
(a ring of distinct inputs, as verify feeds them), produced (a copy kernel wrote it just before, as the
previous kernel does in the model), produced after a GEMM (the model's power draw too), and the
candidate with its own float32 parameters. `--clocks` samples the GPU's SM clock and power
(nvidia-smi) beside the run and reports them per verify step and per validate side. Writes
apriori.json, apriori.tar.gz (<name>/verify.json: `tar xzf apriori.tar.gz -C docs/gpu/apriori`),
clocks.csv.gz and the log. `--dry-run`: the same on this CPU with tiny models.

    OUT=$OUT python3 lab/gpu/gpu_validate.py --cpu-probe --only bert-layernorm --budget 120

`--cpu-probe` builds each named row's model in this process with the candidate swapped in (as validate
does) and times, interleaved, each replaced call on the host (forward hooks, unprofiled, the GPU fed),
base and variant: the call's CPU time in the model, beside verify's `call_us`. Writes cpu_probe.json
and the log.

Writes under --out (default $OUT), at most 8 files:
  validation.json       the `headroom validate --json` objects, a list (-> docs/gpu/validation.json)
  loop.json             per substitution: the extract summary, the verify verdict and speedup, the
                        projection from the verified speedup, the GPU-kernel check, durations, skips
  gpu_validate.log      everything the commands printed
  runs-<k>.tar.gz       k = 1..5, the substitutions dealt round robin: each run's validate
                        directory (run.json, result.json, base/variant traces) as <name>/, and under
                        <name>/loop/ the extracted problem, its entry and trace, and verify.json
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CAND = REPO / "examples" / "substitutions"


# name, workload, extra workload options, module class, candidate, estimated seconds on the H200
SUBSTITUTIONS = [
    ("llama7b-prefill-rmsnorm", "llama-7b", [], "LlamaRMSNorm", "llama_rmsnorm.py", 85),
    ("llama7b-prefill-rmsnorm-checked", "llama-7b", [], "LlamaRMSNorm", "llama_rmsnorm_checked.py", 80),
    ("llama7b-prefill-rmsnorm-fp64", "llama-7b", [], "LlamaRMSNorm", "llama_rmsnorm_fp64.py", 80),
    (
        "llama7b-decode-bs1-rmsnorm",
        "llama-7b",
        ["--phase", "decode", "--batch", "1"],
        "LlamaRMSNorm",
        "llama_rmsnorm.py",
        70,
    ),
    ("bert-layernorm", "bert-base", [], "LayerNorm", "layernorm_fused.py", 55),
    (
        "gpt2xl-decode-bs1-gelu",
        "gpt2-xl",
        ["--phase", "decode", "--batch", "1"],
        "NewGELUActivation",
        "gpt2_gelu_tanh.py",
        60,
    ),
    ("dlrm-train-interaction", "dlrm", [], "InteractionArch", "dlrm_interaction.py", 80),
    ("gpt2xl-prefill-gelu", "gpt2-xl", [], "NewGELUActivation", "gpt2_gelu_tanh.py", 75),
    ("llama7b-prefill-swiglu", "llama-7b", [], "LlamaMLP", "llama_swiglu_mlp.py", 100),
]
# Issue 48's new rows (`--only` them; `--set new`): a synchronising and a slower candidate where the CPU's
# launches bound the step, the SwiGLU MLP at decode, LayerNorm fused in a second model in both regimes, and
# decode at batch 8 (between the regimes).
NEW_ROWS = [
    (
        "llama7b-decode-bs1-rmsnorm-checked",
        "llama-7b",
        ["--phase", "decode", "--batch", "1"],
        "LlamaRMSNorm",
        "llama_rmsnorm_checked.py",
        70,
    ),
    (
        "llama7b-decode-bs1-rmsnorm-fp64",
        "llama-7b",
        ["--phase", "decode", "--batch", "1"],
        "LlamaRMSNorm",
        "llama_rmsnorm_fp64.py",
        70,
    ),
    (
        "llama7b-decode-bs1-swiglu",
        "llama-7b",
        ["--phase", "decode", "--batch", "1"],
        "LlamaMLP",
        "llama_swiglu_mlp.py",
        75,
    ),
    (
        "llama7b-decode-bs8-rmsnorm",
        "llama-7b",
        ["--phase", "decode", "--batch", "8"],
        "LlamaRMSNorm",
        "llama_rmsnorm.py",
        70,
    ),
    ("gpt2xl-prefill-layernorm", "gpt2-xl", [], "LayerNorm", "layernorm_fused.py", 75),
    (
        "gpt2xl-decode-bs1-layernorm",
        "gpt2-xl",
        ["--phase", "decode", "--batch", "1"],
        "LayerNorm",
        "layernorm_fused.py",
        60,
    ),
    ("bert-layernorm-fp32", "bert-base", ["--dtype", "float32"], "LayerNorm", "layernorm_fused.py", 55),
]
SUBSTITUTIONS += NEW_ROWS
# Issue 43's rows under CUDA graphs (`headroom validate --graphs`: both sides captured and replayed, profiled as
# `headroom profile --graphs` does, so the a-priori estimate projects onto replays). Decode, where graphs matter.
GRAPH_ROWS = [
    (
        "llama7b-decode-bs1-rmsnorm-graphs",
        "llama-7b",
        ["--phase", "decode", "--batch", "1"],
        "LlamaRMSNorm",
        "llama_rmsnorm.py",
        80,
    ),
    (
        "llama7b-decode-bs1-swiglu-graphs",
        "llama-7b",
        ["--phase", "decode", "--batch", "1"],
        "LlamaMLP",
        "llama_swiglu_mlp.py",
        85,
    ),
    (
        "gpt2xl-decode-bs1-gelu-graphs",
        "gpt2-xl",
        ["--phase", "decode", "--batch", "1", "--kv-cache", "static"],
        "NewGELUActivation",
        "gpt2_gelu_tanh.py",
        70,
    ),
    (
        "llama7b-decode-bs32-rmsnorm-graphs",
        "llama-7b",
        ["--phase", "decode", "--batch", "32"],
        "LlamaRMSNorm",
        "llama_rmsnorm.py",
        80,
    ),
]
SUBSTITUTIONS += GRAPH_ROWS
VALIDATE_FLAGS = {row[0]: ["--graphs"] for row in GRAPH_ROWS}  # validate's own flags (not extract's)
# verify's: a graph row's candidate is checked capturable and timed on the gated clock (docs/verify.md)
VERIFY_FLAGS = {row[0]: ["--graphs"] for row in GRAPH_ROWS}
TRAINING = {"dlrm", "dlrm-dcn", "resnet-50"}
MAX_ARCHIVES = 5  # + validation.json, loop.json and the log: 8 files
SLOW = ("fp64",)  # a candidate expected to be slower (verify conclusive below 1, a projected slowdown)
TIMING_BUDGET_S = 60  # validate's adaptive rounds (headroom.measure): at most this long per substitution


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
        if "USDT:" in line:  # Kineto's start/stop chatter
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
        "    pass\n".replace("{name}", candidate.name)
    )
    return dest


APRIORI = REPO / "docs" / "gpu" / "apriori"


class Clocks:
    """nvidia-smi sampling the GPU's SM and memory clocks, power and temperature every 100 ms into a
    file, for the whole run (None of it on a CPU or without nvidia-smi)."""

    QUERY = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu"

    def __init__(self, path: Path, enabled: bool):
        self.path, self.proc = path, None
        if enabled and shutil.which("nvidia-smi"):
            self.f = open(path, "w")
            self.proc = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={self.QUERY}", "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=self.f,
                stderr=subprocess.DEVNULL,
            )

    def window(self, t0: float, t1: float) -> dict | None:
        if self.proc is None:
            return None
        self.f.flush()
        return window_stats(clock_samples(self.path.read_text()), t0, t1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.f.close()


def clock_samples(text: str) -> list[tuple[float, float, float, float, float]]:
    """(unix time, SM MHz, memory MHz, watts, deg C) per nvidia-smi line; lines it could not read skipped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            stamp, frac = (parts[0].split(".") + ["0"])[:2]
            t = time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)
            out.append((t, *(float(p) for p in parts[1:])))
        except ValueError:
            continue
    return out


def window_stats(samples: list, t0: float, t1: float) -> dict | None:
    """Mean SM clock, memory clock, power and temperature over the samples in [t0, t1]."""
    inside = [s for s in samples if t0 <= s[0] <= t1]
    if not inside:
        return None
    n = len(inside)
    return {
        "n": n,
        "sm_mhz": round(sum(s[1] for s in inside) / n, 1),
        "mem_mhz": round(sum(s[2] for s in inside) / n, 1),
        "power_w": round(sum(s[3] for s in inside) / n, 1),
        "temp_c": round(sum(s[4] for s in inside) / n, 1),
    }


def side_clocks(run_json: Path, clocks: Clocks) -> dict:
    """Per side of validate's interleaved rounds: the clocks over its blocks (their `<side>_t` spans)."""
    timing = json.loads(run_json.read_text()).get("timing") or {}
    out = {}
    for side in ("base", "variant"):
        spans = [r[f"{side}_t"] for r in timing.get("rounds", []) if f"{side}_t" in r]
        stats = [clocks.window(a, b) for a, b in spans]
        stats = [x for x in stats if x]
        if stats:
            n = sum(x["n"] for x in stats)
            out[side] = {k: round(sum(x[k] * x["n"] for x in stats) / n, 1) for k in ("sm_mhz", "power_w", "temp_c")}
            out[side]["n"] = n
    return out


def extract_and_verify(
    rec: dict, name: str, workload: str, module: str, cand: Path, wl: list, work: Path, device: str, log: Log, left
) -> tuple[dict | None, dict, float]:
    """Extract `module`'s problem from the workload `wl` names, then verify `cand` on it (a training
    problem forward + backward); writes work/verify.json and the steps' seconds into `rec`. Returns
    extract's JSON (None when it failed, with `rec["status"]` saying so), verify's JSON and when verify began."""
    rc, out, dt = headroom(["extract", *wl, "--module", module, "--out", str(work / "problem"), "--json"], log, left())
    rec["steps"]["extract_s"] = round(dt, 1)
    if rc != 0:
        rec["status"] = f"extract failed (exit {rc})"
        return None, {}, time.time()
    ex = parse_json(out)
    vcand = training_candidate(cand, work / "candidate_train.py") if workload in TRAINING else cand
    flags = ["--device", device] if device == "cpu" else VERIFY_FLAGS.get(name, [])
    t_wall = time.time()
    rc, out, dt = headroom(["verify", str(ex["problem"]), str(vcand), "--json", *flags], log, left())
    rec["steps"]["verify_s"] = round(dt, 1)
    v = parse_json(out)
    (work / "verify.json").write_text(json.dumps(v, indent=1) + "\n")
    return ex, v, t_wall


def one(
    name,
    workload,
    opts,
    module,
    cand_name,
    work: Path,
    device: str,
    log: Log,
    deadline: float,
    clocks: Clocks | None = None,
) -> dict:
    cand = (CAND / cand_name).relative_to(REPO)  # relative: the commands run in REPO, the results name it so
    rec: dict = {
        "name": name,
        "workload": workload,
        "options": opts,
        "module": module,
        "candidate": str(cand),
        "device": device,
        "steps": {},
    }
    dev = ["--device", device]
    tiny = ["--flavour", "tiny"] if device == "cpu" else []
    wl = [workload, *opts, *tiny, *dev]

    # 1. extract
    def left() -> float:
        return max(deadline - time.monotonic(), 5.0)

    # 1. extract, 2. verify
    ex, v, t_wall = extract_and_verify(rec, name, workload, module, cand, wl, work, device, log, left)
    if ex is None:
        return rec
    rec["extract"] = {k: ex.get(k) for k in ("name", "selectors", "share", "calls_per_step", "instances")}
    entry, vjson = Path(ex["entry"]), work / "verify.json"
    if clocks is not None and clocks.proc is not None:
        rec["clocks"] = {"verify": clocks.window(t_wall, time.time())}
    rec["verify"] = {
        k: v.get(k) for k in ("verdict", "speedup", "speedup_fp32", "launches_per_call", "reason") if k in v
    }
    rec["verify"]["failed_checks"] = [c["name"] for c in v.get("checks", []) if not c.get("passed")]
    t = v.get("timing") or {}
    rec["verify"].update(
        {
            k: t.get(k)
            for k in (
                "clock",
                "candidate_clock",
                "rounds",
                "rounds_stop",
                "iters_per_phase",
                "overhead_share",
                "speedup_ci",
            )
        }
    )
    rec["verify"]["per_call"] = v.get("per_call")
    rec["verify"]["elapsed_s"] = v.get("elapsed_s")
    # 3. validate
    run_dir = work / "run"
    budget = left()
    # validate's estimate is the a-priori one: verify's result (when it passed) on validate's own base trace
    apriori = ["--speedups", str(vjson), "--problems", str(entry)] if v.get("verdict") == "pass" else []
    graphs = VALIDATE_FLAGS.get(name, []) if device != "cpu" else []  # a CPU captures no CUDA graph
    rc, out, dt = headroom(
        [
            "validate",
            *wl,
            "--replace",
            f"{module}={cand}",
            "--out",
            str(run_dir),
            "--json",
            "--timeout",
            str(int(budget)),
            "--timing-budget",
            str(TIMING_BUDGET_S),
            *apriori,
            *graphs,
        ],
        log,
        budget + 15,
    )
    rec["steps"]["validate_s"] = round(dt, 1)
    if rc != 0:
        rec["status"] = f"validate failed (exit {rc})"
        return rec
    result = parse_json(out)
    rec["validate"] = result
    if clocks is not None and clocks.proc is not None and (run_dir / "run.json").is_file():
        rec.setdefault("clocks", {}).update(side_clocks(run_dir / "run.json", clocks))
    part = (result.get("part") or {}).get("speedup")
    vs = v.get("speedup") or (v.get("timing") or {}).get("speedup_estimate")
    rec["in_model"] = {"part_speedup": part, "verify_speedup": vs, "ratio": vs / part if part and vs else None}
    # 4. the verified speedup, projected on the base trace (verify -> project)
    if v.get("verdict") == "pass":
        rc, out, dt = headroom(
            ["project", str(run_dir / "base.json.gz"), "--problems", str(entry), "--speedups", str(vjson), "--json"],
            log,
            left(),
        )
        rec["steps"]["project_s"] = round(dt, 1)
        if rc == 0:
            pj = parse_json(out)
            proj = {p["method"]: p["speedup"] for p in pj.get("projections", []) if p.get("scenario") == "speedups"}
            est = pj.get("estimate") or {}
            measured = (result.get("measured") or {}).get("speedup")
            rec["project_from_verify"] = {
                "amdahl": proj.get("amdahl"),
                "replay": proj.get("replay"),
                "estimate": est.get("speedup"),
                "low": est.get("low"),
                "high": est.get("high"),
                "measured": measured,
                "error": est["speedup"] / measured - 1 if est.get("speedup") and measured else None,
                "entries": pj.get("entries"),
                "selected_us": pj.get("selected_us"),
                "warnings": pj.get("warnings"),
            }
            # the one projection path: validate's estimate is `headroom project`'s on the same trace and inputs
            ve, pe = (result.get("projected") or {}).get("estimate"), est.get("speedup")
            rec["validate_equals_project"] = bool(ve and pe and abs(ve / pe - 1) < 1e-6)
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


def apriori_one(
    name,
    workload,
    opts,
    module,
    cand_name,
    work: Path,
    device: str,
    log: Log,
    deadline: float,
    clocks: Clocks | None = None,
    probe: bool = False,
) -> dict:
    """The a-priori row `name` again: extract -> verify -> project onto the committed base trace of
    docs/gpu/apriori/<name>/, against the committed measurement (no validate)."""
    committed = APRIORI / name
    entry = next(committed.glob("*.toml"))
    result = json.loads((committed / "result.json").read_text())
    cand = (CAND / cand_name).relative_to(REPO)
    rec: dict = {"name": name, "mode": "apriori", "candidate": str(cand), "device": device, "steps": {}}
    dev = ["--device", device]
    wl = [workload, *opts, *(["--flavour", "tiny"] if device == "cpu" else []), *dev]

    def left() -> float:
        return max(deadline - time.monotonic(), 5.0)

    ex, v, t_wall = extract_and_verify(rec, name, workload, module, cand, wl, work, device, log, left)
    if ex is None:
        return rec
    problem, vjson = Path(ex["problem"]), work / "verify.json"
    if clocks is not None and clocks.proc is not None:
        rec["clocks"] = {"verify": clocks.window(t_wall, time.time()), "validate (committed run)": None}
    t = v.get("timing") or {}
    rec["verify"] = {
        "verdict": v.get("verdict"),
        "speedup": v.get("speedup"),
        "reason": v.get("reason"),
        "candidate_clock": t.get("candidate_clock"),
        "rounds": t.get("rounds"),
        "speedup_ci": t.get("speedup_ci"),
        "child_clock_ms": t.get("child_clock_ms"),
        "per_call": v.get("per_call"),
    }
    cps = float(result["detail"]["calls_per_step"])
    model = {
        "reference": result["detail"]["part_base"]["forward_us"] / cps,
        "candidate": result["detail"]["part_variant"]["forward_us"] / cps,
    }
    pc = v.get("per_call") or {}
    rec["in_model"] = {
        "part_speedup": result["part"]["speedup"],
        "verify_speedup": v.get("speedup"),
        "ratio": v["speedup"] / result["part"]["speedup"] if v.get("speedup") else None,
        "model_kernel_us_per_call": model,
        "verify_kernel_us_per_call": {w: (pc.get(w) or {}).get("kernel_us") for w in model},
        "launches": {
            "verify": [(pc.get(w) or {}).get("launches") for w in model],
            "model": result["part"]["launches_per_call"],
        },
    }
    if v.get("verdict") == "pass":
        rc, out, dt = headroom(
            ["project", str(committed / "base.json.gz"), "--problems", str(entry), "--speedups", str(vjson), "--json"],
            log,
            left(),
        )
        rec["steps"]["project_s"] = round(dt, 1)
        est = parse_json(out).get("estimate") or {} if rc == 0 else {}
        measured = result["measured"]["speedup"]
        target = 0.06 if result["baseline"]["launch_bound"] else 0.03
        err = est["speedup"] / measured - 1 if est.get("speedup") else None
        rec["project_from_verify"] = {
            "estimate": est.get("speedup"),
            "low": est.get("low"),
            "high": est.get("high"),
            "measured": measured,
            "error": err,
            "target": target,
            "met": err is not None and abs(err) <= target,
        }
    if probe and workload not in TRAINING and time.monotonic() < deadline - 20:
        t0 = time.monotonic()
        try:
            rec["l2_probe"] = l2_probe(problem, REPO / cand, device, deadline, clocks=clocks)
        except Exception as e:  # noqa: BLE001 - the probe is a cross-check; the row stands without it
            rec["l2_probe"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        rec["steps"]["probe_s"] = round(time.monotonic() - t0, 1)
    rec["status"] = "ok" if v.get("verdict") == "pass" else f"verify: {v.get('verdict')}"
    return rec


def l2_probe(
    problem_path: Path,
    cand_path: Path,
    device: str,
    deadline: float,
    iters: int | None = None,
    clocks: Clocks | None = None,
) -> dict:
    """Reference and candidate forwards timed in this process (CUDA events around the forward only; a
    wall clock on a CPU), per input state: `cold` (a ring of distinct inputs over twice the L2, as verify
    feeds them), `produced` (one input, a copy kernel wrote it just before the forward, as the previous
    kernel does in the model), `produced_gemm` (a bf16 GEMM, then the copy: the model's power draw too),
    and the candidate with its own float32 parameters (`kernelbench_params`, produced). Median us."""
    import statistics

    import torch

    from headroom.pyfile import import_file
    from headroom.verify import problem as prob

    p = prob.load_problem(problem_path)
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    iters = iters or (100 if cuda else 6)
    ref = prob.build_model(p.Model, p, 1, device)
    cls = import_file(cand_path, "probe_candidate").ModelNew
    cand = prob.build_model(cls, p, 1, device)
    with torch.device(device):
        raw = cls(*prob.init_inputs(p, 1, device)).to(device)
    x0 = prob.published_inputs(p, 1, device)
    nbytes = sum(t.numel() * t.element_size() for t in x0 if isinstance(t, torch.Tensor))
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size if cuda else 1 << 20
    ring = [
        [t.clone() if isinstance(t, torch.Tensor) else t for t in x0]
        for _ in range(max(2, min(16, -(-2 * l2 // max(nbytes, 1)) + 1)))
    ]
    src = [t.clone() if isinstance(t, torch.Tensor) else t for t in x0]
    # ~1.1 TFLOP (~1.6 ms on an H200): long enough to draw a GEMM's power before the forward
    big = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16) if cuda else torch.randn(64, 64)

    def timed(model, state: str) -> float:
        out = []
        for i in range(iters):
            xs = ring[i % len(ring)] if state == "cold" else x0
            if state.startswith("produced"):
                if state == "produced_gemm":
                    big @ big
                for a, b in zip(x0, src):
                    if isinstance(a, torch.Tensor):
                        a.copy_(b)
            if cuda:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                model(*xs)
                e.record()
                out.append((s, e))
            else:
                t0 = time.perf_counter()
                model(*xs)
                out.append(time.perf_counter() - t0)
        if cuda:
            torch.cuda.synchronize(dev)
            return statistics.median(s.elapsed_time(e) * 1e3 for s, e in out[iters // 4 :])
        return statistics.median(out[iters // 4 :]) * 1e6

    res: dict = {"input_bytes": nbytes, "l2_bytes": l2, "ring": len(ring), "iters": iters, "us": {}}
    with torch.no_grad():
        for state in ("cold", "produced", "produced_gemm"):
            if time.monotonic() > deadline - 10:
                break
            t_wall = time.time()
            res["us"][state] = {"reference": round(timed(ref, state), 2), "candidate": round(timed(cand, state), 2)}
            if clocks is not None and clocks.proc is not None:
                res.setdefault("clocks", {})[state] = clocks.window(t_wall, time.time())
            r = res["us"][state]
            r["speedup"] = round(r["reference"] / r["candidate"], 4) if r["candidate"] > 0 else None
        if time.monotonic() < deadline - 10:
            res["us"]["kernelbench_params"] = {"candidate": round(timed(raw, "produced"), 2)}
    return res


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


def apriori_main(args: argparse.Namespace) -> int:
    """`--apriori`: the rows' a-priori step, writing apriori.json and apriori.tar.gz incrementally."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(REPO) + (os.pathsep + old if old else "")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(args.out)
    (out / "work").mkdir(parents=True, exist_ok=True)
    log = Log(out / "gpu_validate.log")
    clocks = Clocks(out / "clocks.csv", args.clocks and args.device != "cpu")
    t_start = time.monotonic()
    names = args.only or sorted(p.name for p in APRIORI.iterdir() if (p / "verify.json").is_file())
    by_name = {s[0]: s for s in SUBSTITUTIONS}
    subs = [by_name[n] for n in names if n in by_name]  # in the order asked: the first is the one that matters
    records: list[dict] = []
    try:
        for name, workload, opts, module, cand, est in subs:
            left = args.budget - (time.monotonic() - t_start)
            need = 0.65 * est  # extract + verify + project: ~65% of the whole loop's time
            if left < need:
                log(f"== {name}: skipped ({left:.0f} s left of the budget, needs ~{need:.0f} s)")
                records.append({"name": name, "status": f"skipped: {left:.0f} s left"})
                continue
            log(f"== {name} ({left:.0f} s left)")
            t0 = time.monotonic()
            work = out / "work" / name
            work.mkdir(exist_ok=True)
            try:
                rec = apriori_one(
                    name,
                    workload,
                    opts,
                    module,
                    cand,
                    work,
                    args.device,
                    log,
                    deadline=time.monotonic() + min(left, 200.0),
                    clocks=clocks,
                    probe=args.l2_probe,
                )
            except Exception as e:  # noqa: BLE001 - one row must not stop the others
                rec = {"name": name, "status": f"script error: {type(e).__name__}: {e}"}
            rec["seconds"] = round(time.monotonic() - t0, 1)
            records.append(rec)
            if (work / "verify.json").is_file():
                stage = out / ".staging" / name
                stage.mkdir(parents=True, exist_ok=True)
                shutil.copy(work / "verify.json", stage / "verify.json")
                with tarfile.open(out / ".apriori.tar.gz.tmp", "w:gz") as tar:
                    for d in sorted((out / ".staging").iterdir()):
                        tar.add(d, arcname=d.name)
                os.replace(out / ".apriori.tar.gz.tmp", out / "apriori.tar.gz")
            shutil.rmtree(work, ignore_errors=True)
            pf = rec.get("project_from_verify") or {}
            im = rec.get("in_model") or {}
            log(
                f"== {name}: {rec['status']} in {rec['seconds']} s; verify {im.get('verify_speedup')} "
                f"(in model {im.get('part_speedup')}); estimate {pf.get('estimate')} vs measured {pf.get('measured')}"
                f" error {pf.get('error')} met {pf.get('met')}"
            )
            if rec.get("l2_probe"):
                log(f"   l2 probe: {json.dumps(rec['l2_probe'].get('us', rec['l2_probe']))}")
                if rec["l2_probe"].get("clocks"):
                    log(f"   l2 probe clocks: {json.dumps(rec['l2_probe']['clocks'])}")
            if (rec.get("clocks") or {}).get("verify"):
                log(f"   clocks during verify: {rec['clocks']['verify']}")
            (out / "apriori.json").write_text(json.dumps({"device": args.device, "records": records}, indent=1) + "\n")
    finally:
        clocks.stop()
        if (out / "clocks.csv").is_file():
            with open(out / "clocks.csv", "rb") as f, gzip.open(out / "clocks.csv.gz", "wb") as g:
                shutil.copyfileobj(f, g)
            (out / "clocks.csv").unlink()
        shutil.rmtree(out / "work", ignore_errors=True)
        shutil.rmtree(out / ".staging", ignore_errors=True)
    total = time.monotonic() - t_start
    (out / "apriori.json").write_text(
        json.dumps({"device": args.device, "seconds": round(total, 1), "records": records}, indent=1) + "\n"
    )
    ok = sum(r.get("status") == "ok" for r in records)
    log(
        f"done in {total:.0f} s: {ok} of {len(records)} ok; files: apriori.json, apriori.tar.gz, gpu_validate.log"
        f"{', clocks.csv.gz' if (out / 'clocks.csv.gz').is_file() else ''}"
    )
    return 0 if ok == len(records) else 1


def _options(opts: list[str]) -> dict:
    """A row's workload options (`--phase decode --batch 1`) as `Options` fields."""
    out: dict = {}
    for k, v in zip(opts[::2], opts[1::2]):
        out[k.lstrip("-").replace("-", "_")] = int(v) if v.isdigit() else v
    return out


def cpu_probe(
    workload: str, opts: list[str], module: str, cand: Path, device: str, deadline: float, rounds: int = 15
) -> dict:
    """The host time of each replaced call inside the model, unprofiled, base and variant, in this
    process: a pre- and a post-forward hook on every replaced instance (the originals, then the
    candidates) read `perf_counter`; the step runs as in validate's rounds, the GPU fed. A call that
    neither synchronises nor fills the launch queue returns when its launches are queued, so its host
    time is its CPU time: the quantity the projection takes as `call_us` (verify) and `headroom
    validate` converts from the variant trace. Interleaved rounds; the median per call per side."""
    import statistics

    import torch

    from headroom.devices import resolve_device
    from headroom.extract.capture import find_class, instances_of, record_calls, record_constructions
    from headroom.profile.registry import get_workload
    from headroom.profile.workload import Options
    from headroom.validate.substitute import ReplaceSpec, load_candidate_class, substitute

    spec = get_workload(workload)
    dev = resolve_device(device)
    kw = _options(opts) | ({"flavour": "tiny"} if dev.type == "cpu" else {})
    cfg = spec.resolve(Options(**kw), dev.type)
    cls = find_class(spec, cfg, module)
    classes = [ReplaceSpec(module, cls, cand, load_candidate_class(cand))]
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
        torch.backends.cudnn.allow_tf32 = cfg.tf32
    torch.manual_seed(0)
    with record_constructions(cls) as b:
        step = spec.build(cfg, dev)
    try:
        sub = substitute(step.modules, classes, {cls: b}, dev, step.train)
        calls = len(record_calls(step, cls, instances_of(step.modules, cls)))
        per: dict[str, list[float]] = {"base": [], "variant": []}
        step_ms: dict[str, list[float]] = {"base": [], "variant": []}

        def timed_step(side: str) -> None:
            sub.use(side)
            starts: list[float] = []
            hooks = []
            for m in sub.active_modules():
                hooks.append(m.register_forward_pre_hook(lambda *_: starts.append(time.perf_counter())))
                hooks.append(
                    m.register_forward_hook(lambda *_: per[side].append((time.perf_counter() - starts.pop()) * 1e6))
                )
            try:
                t0 = time.perf_counter()
                step()
                if cuda:
                    torch.cuda.synchronize(dev)
                step_ms[side].append((time.perf_counter() - t0) * 1e3)
            finally:
                for h in hooks:
                    h.remove()

        for side in ("base", "variant"):
            sub.use(side)
            for _ in range(3):
                step()
        if cuda:
            torch.cuda.synchronize(dev)
        n = 0
        for r in range(rounds):
            if time.monotonic() > deadline:
                break
            for side in ("base", "variant") if r % 2 == 0 else ("variant", "base"):
                timed_step(side)
            n += 1
        med = {k: statistics.median(v) for k, v in per.items() if v}
        res = {
            "calls_per_step": calls,
            "rounds": n,
            "method": "perf_counter around each replaced call "
            "(forward pre/post hooks), unprofiled, the GPU fed; step: host wall time to synchronize",
            "call_us": {k: round(v, 2) for k, v in med.items()},
            "call_us_p25_p75": {
                k: [round(x, 2) for x in statistics.quantiles(v, n=4)[::2]] for k, v in per.items() if len(v) > 1
            },
            "calls_timed": {k: len(v) for k, v in per.items()},
            "step_ms": {k: round(statistics.median(v), 4) for k, v in step_ms.items() if v},
        }
        if len(med) == 2:
            res["added_us_per_call"] = round(med["variant"] - med["base"], 2)
        return res
    finally:
        step.close()


def cpu_probe_main(args: argparse.Namespace) -> int:
    """`--cpu-probe`: per named row, the replaced calls' host time in the model, base and variant (cpu_probe.json)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "gpu_validate.log")
    t_start = time.monotonic()
    by_name = {s[0]: s for s in SUBSTITUTIONS}
    records = []
    for name in args.only or ["bert-layernorm"]:
        _, workload, opts, module, cand, _ = by_name[name]
        left = args.budget - (time.monotonic() - t_start)
        if left < 30:
            records.append({"name": name, "status": f"skipped: {left:.0f} s left"})
            continue
        t0 = time.monotonic()
        try:
            rec = {
                "name": name,
                "status": "ok",
                **cpu_probe(workload, opts, module, CAND / cand, args.device, time.monotonic() + left - 20),
            }
        except Exception as e:  # noqa: BLE001 - one row must not stop the others
            rec = {"name": name, "status": f"error: {type(e).__name__}: {e}"}
        rec["seconds"] = round(time.monotonic() - t0, 1)
        records.append(rec)
        log(f"== {name}: {json.dumps(rec)}")
        (out / "cpu_probe.json").write_text(json.dumps({"device": args.device, "records": records}, indent=1) + "\n")
    log(f"done in {time.monotonic() - t_start:.0f} s: cpu_probe.json, gpu_validate.log")
    return 0 if all(r["status"] == "ok" for r in records) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out/gpu_validate"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget", type=float, default=510.0, help="seconds for the whole run")
    ap.add_argument("--only", nargs="*", help="substitution names to run")
    ap.add_argument(
        "--apriori",
        action="store_true",
        help="only the a-priori step of the named rows of docs/gpu/apriori (extract, verify, project)",
    )
    ap.add_argument("--l2-probe", action="store_true", help="with --apriori: time both forwards per input L2 state")
    ap.add_argument("--clocks", action="store_true", help="sample SM clock and power (nvidia-smi) beside the run")
    ap.add_argument(
        "--cpu-probe",
        action="store_true",
        help="only each named row's replaced calls, host time in the model base and variant (no profiler)",
    )
    ap.add_argument(
        "--archives",
        type=int,
        default=MAX_ARCHIVES,
        help="runs-<k>.tar.gz files (fewer leaves room for another job's files in the same call)",
    )
    ap.add_argument("--dry-run", action="store_true", help="on this CPU with tiny models (the plumbing)")
    args = ap.parse_args()
    if args.dry_run:
        args.device = "cpu"
    known = {s[0] for s in SUBSTITUTIONS}
    bad = [n for n in args.only or [] if n not in known or (args.apriori and not (APRIORI / n).is_dir())]
    if bad:
        print(
            f"gpu_validate.py: unknown substitution(s) {', '.join(bad)} (known: {', '.join(sorted(known))})",
            file=sys.stderr,
        )
        return 2
    if args.apriori:
        return apriori_main(args)
    if args.cpu_probe:
        return cpu_probe_main(args)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(REPO) + (os.pathsep + old if old else "")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # one-rank NCCL group for torchrec DMP: no NVLink multicast
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work_root = out / "work"
    work_root.mkdir(exist_ok=True)
    log = Log(out / "gpu_validate.log")
    clocks = Clocks(out / "clocks.csv", args.clocks and args.device != "cpu")
    t_start = time.monotonic()
    by_name = {s[0]: s for s in SUBSTITUTIONS}
    subs = [by_name[n] for n in args.only] if args.only else SUBSTITUTIONS  # in the order asked
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
            rec = one(
                name,
                workload,
                opts,
                module,
                cand,
                work,
                args.device,
                log,
                deadline=time.monotonic() + min(left, 300.0),
                clocks=clocks,
            )
        except Exception as e:  # noqa: BLE001 - one substitution must not stop the others
            rec = {"name": name, "status": f"script error: {type(e).__name__}: {e}"}
        rec["seconds"] = round(time.monotonic() - t0, 1)
        slots = args.archives - (1 if clocks.proc is not None else 0)  # clocks.csv.gz is one of the 8 files
        rec["archive"] = archive(work, out, slot=len(records) % slots + 1)  # round robin: each under 16 MB
        shutil.rmtree(work, ignore_errors=True)
        log(f"== {name}: {rec['status']} in {rec['seconds']} s")
        if rec.get("clocks"):
            log(f"   clocks (verify; validate base, variant): {json.dumps(rec['clocks'])}")
        if "validate" in rec:
            results.append(rec["validate"])
        records.append(rec)
        (out / "validation.json").write_text(json.dumps(results, indent=1) + "\n")
        (out / "loop.json").write_text(json.dumps({"device": args.device, "records": records}, indent=1) + "\n")
    clocks.stop()
    if (out / "clocks.csv").is_file():  # one more file: the archives then stop at 4
        with open(out / "clocks.csv", "rb") as f, gzip.open(out / "clocks.csv.gz", "wb") as g:
            shutil.copyfileobj(f, g)
        (out / "clocks.csv").unlink()
    shutil.rmtree(work_root, ignore_errors=True)
    shutil.rmtree(out / ".staging", ignore_errors=True)
    total = time.monotonic() - t_start
    files = sorted({r["archive"] for r in records if r.get("archive")})
    (out / "loop.json").write_text(
        json.dumps({"device": args.device, "seconds": round(total, 1), "archives": files, "records": records}, indent=1)
        + "\n"
    )
    log(
        f"done in {total:.0f} s: {sum(r.get('status') == 'ok' for r in records)} of {len(records)} ok; "
        f"files: validation.json, loop.json, gpu_validate.log, {', '.join(files)}"
    )
    return 0 if all(r.get("status") == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
