"""Re-capture the shipped traces with module ranges, measure what the ranges cost, and rank every
trace's modules; on one GPU (the H200), in one command of at most 9 minutes.

    OUT=/path/for/results bash lab/gpu/gpu_capture.sh     (sets PYTHONPATH, NCCL and tokenizer flags)
    python3 lab/gpu/gpu_capture.py OUT [BUDGET_S] [--dry] [--only ID,ID]

In order, while the budget lasts (a run that no longer fits is skipped and reported):
1. the ten shipped traces (traces/*.json.gz): the seven workloads at their defaults, llama-7b
   decode with a static and a dynamic cache, llama-7b --compile; module ranges are on by default;
2. lab/probes/module_ranges.py: step time with and without module ranges, interleaved, without
   and under the profiler (llama-7b prefill, decode, resnet-50 train, dlrm train);
3. the --layers checks (traces/checks/: llama-7b --layers 4, prefill and decode);
4. the scaling traces (traces/scaling/: llama-7b --flavour 13b/70b --layers 4).
Each profile run is a child process (`--run ARGS`) with a time limit, so a crash or hang never stops
the rest; in the same process it writes `headroom targets TRACE --by module --json` (by class, self
and total time, and by instance) for its trace.

Writes under OUT (at most 8 files, each at most 16 MB):
    traces-N.tar        traces/*.json.gz + traces/manifest.json (N > 1 only past 15 MB)
    checks.tar          traces/checks/ and traces/scaling/ (with their manifests)
    targets.json        trace name -> {"module:self", "module:total", "module_path:self"}: targets --json
    module_ranges.json  the overhead benchmark (lab/probes/module_ranges.py)
    results.json        per run: status, step time, profiler overhead, idle, addressable, module ranges;
                        the --layers check; the environment
    capture.log         every run's output

`--dry`: the same plan on the CPU at tiny sizes (tests the script; docs/modules.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FILE = 15 * 2**20
PACK_RESERVE_S = 15
SPEEDUP = 1.5
# (targets grouping, scope, rows kept) written for every trace
TARGET_TABLES = (("module", "self", None), ("module", "total", None), ("module_path", "self", 40))


@dataclass
class Run:
    id: str
    workload: str
    options: dict
    where: str  # "traces", "checks", "scaling-13b", "scaling-70b"
    limit_s: float  # time limit of the child process
    minimum_s: float  # do not start with less than this left


def plan(dry: bool) -> list[Run]:
    """The profile runs, in priority order (the overhead benchmark runs after the shipped traces)."""
    ship = [
        Run("llama-7b", "llama-7b", {}, "traces", 150, 40),
        Run("gpt2-xl", "gpt2-xl", {}, "traces", 120, 30),
        Run("bert-base", "bert-base", {}, "traces", 90, 25),
        Run("vit-b-16", "vit-b-16", {}, "traces", 90, 25),
        Run("resnet-50", "resnet-50", {}, "traces", 120, 35),
        Run("dlrm", "dlrm", {}, "traces", 180, 45),
        Run("dlrm-dcn", "dlrm-dcn", {}, "traces", 180, 45),
        Run("llama-7b-decode", "llama-7b", {"phase": "decode"}, "traces", 120, 30),
        Run("llama-7b-decode-dynamic", "llama-7b", {"phase": "decode", "kv_cache": "dynamic"}, "traces", 120, 30),
        Run("llama-7b-compile", "llama-7b", {"compile": True}, "traces", 300, 90),
    ]
    later = [
        Run("llama-7b-layers4", "llama-7b", {"layers": 4}, "checks", 90, 25),
        Run("llama-7b-decode-layers4", "llama-7b", {"phase": "decode", "layers": 4}, "checks", 90, 25),
        Run("llama-13b-layers4", "llama-7b", {"flavour": "13b", "layers": 4}, "scaling-13b", 90, 25),
        Run("llama-70b-layers4", "llama-7b", {"flavour": "70b", "layers": 4}, "scaling-70b", 120, 30),
    ]
    if dry:
        for r in ship + later:
            small = {"flavour": "tiny", "batch": 64 if r.workload.startswith("dlrm") else 1}
            if r.workload in ("llama-7b", "gpt2-xl", "bert-base"):
                small["seq"] = 16
            if "layers" in r.options:
                small["layers"] = 1
            r.options = {**{k: v for k, v in r.options.items() if k != "flavour"}, **small}
            r.minimum_s = 5
    return ship + [Run("module-ranges-overhead", "", {}, "", 240, 60)] + later


def run_one(arg: str) -> int:
    """One profile run and its module targets (in its own process)."""
    t0 = time.time()
    from headroom.errors import UserError
    from headroom.jsonio import plain
    from headroom.profile.run import profile_workload
    from headroom.profile.workload import Options
    from headroom.projection.targets import module_ranges_missing, targets, targets_dict

    a = json.loads(arg)
    fast = {"device": "cpu", "steps": 1, "warmup": 1, "timed_steps": 1} if a["dry"] else {}
    try:
        r = profile_workload(a["workload"], Options(**a["options"]), out=a["out"], command=a["command"], **fast)
    except UserError as e:
        print(f"headroom: error: {e}", file=sys.stderr)
        return 2
    d = plain(r)
    d["wall_s"] = time.time() - t0
    an = r.analysis
    missing = module_ranges_missing(an)
    tables = {}
    for by, scope, top in TARGET_TABLES:
        t = targets(an, speedup=SPEEDUP, by=(by,), scope=scope, top=top, replay_top=5)
        tables[f"{by}:{scope}"] = {
            "command": f"headroom targets {r.trace_path.name} --by {by} --scope {scope} --json"
            + (f" --top {top}" if top else " --top 0"),
            **targets_dict(an, t, SPEEDUP, notes=[missing] if missing else []),
        }
    d["targets"] = tables
    d["module_calls"] = len(an.modules)
    json.dump(d, open(a["result"], "w"), default=str)
    rows = tables["module:self"]["targets"]
    top_module = f"{rows[0]['name']} ({100 * rows[0]['share']:.1f}%)" if rows else "none (no module ranges)"
    print(
        f"HEADROOM-RESULT {a['workload']}: step {r.timed.median_ms:.2f} ms, overhead {100 * r.overhead:+.1f}%, "
        f"idle {100 * an.idle_fraction:.1f}%, addressable {100 * an.addressable_fraction:.1f}%, "
        f"{len(an.modules)} module calls, top module {top_module}, trace {r.trace_path.name}"
    )
    return 0


class Capture:
    def __init__(self, out: Path, budget: float, dry: bool, only: set[str] | None):
        self.out, self.budget, self.dry, self.only = out, budget, dry, only
        self.t0 = time.monotonic()
        self.work = Path(tempfile.mkdtemp(prefix="headroom-capture-"))
        self.results_dir = self.work / "results"
        self.results_dir.mkdir()
        self.log_file = open(self.work / "capture.log", "w")
        self.results: dict = {"budget_s": budget, "dry": dry, "runs": {}}
        self.targets: dict = {}

    def log(self, msg: str) -> None:
        print(msg, flush=True)
        self.log_file.write(msg + "\n")
        self.log_file.flush()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.budget - self.elapsed() - PACK_RESERVE_S

    def dir(self, where: str) -> Path:
        d = self.work / where
        d.mkdir(parents=True, exist_ok=True)
        return d

    def child(self, cmd: list[str], limit: float) -> tuple[object, list[str], float]:
        t = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit)
            rc, output = p.returncode, (p.stdout or "") + (p.stderr or "")
        except subprocess.TimeoutExpired as e:
            rc = "timeout"
            output = "".join(
                x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr)
            )
        lines = [line for line in output.splitlines() if not line.startswith("USDT")]
        self.log_file.write("\n".join(lines[-400:]) + "\n")
        return rc, lines, time.monotonic() - t

    def profile(self, run: Run) -> None:
        limit = min(run.limit_s, self.left())
        cmd = command_line(run.workload, run.options)
        res = self.results_dir / f"{run.id}.json"
        arg = json.dumps(
            {
                "workload": run.workload,
                "options": run.options,
                "out": str(self.dir(run.where)),
                "result": str(res),
                "command": cmd,
                "dry": self.dry,
            }
        )
        self.log(f"--- {run.id}: {cmd}  (limit {limit:.0f} s, {self.elapsed():.0f} s elapsed)")
        rc, lines, wall = self.child([sys.executable, __file__, "--run", arg], limit)
        entry: dict = {"command": cmd, "rc": rc, "wall_s": round(wall, 1), "where": run.where}
        summary = None
        if rc == 0 and res.exists():
            try:
                d = json.loads(res.read_text())
                summary = summarize(d)
                self.targets[Path(d["trace"]).name] = d["targets"]
            except Exception as e:
                lines.append(f"could not read the result: {type(e).__name__}: {e}")
        if summary is not None:
            entry.update(status="ok", **summary)
            said = [line for line in lines if line.startswith("HEADROOM-RESULT ")]
            self.log(f"    ok in {wall:.0f} s: {said[-1][len('HEADROOM-RESULT ') :] if said else ''}")
        else:
            if rc == "timeout":
                lines.append(f"timed out after {limit:.0f} s")
            entry.update(status="timeout" if rc == "timeout" else "failed", error_tail=lines[-15:])
            errs = [line for line in lines if "error" in line.lower()] or lines
            self.log(f"    FAILED ({rc}) in {wall:.0f} s: {errs[-1] if errs else ''}")
        self.results["runs"][run.id] = entry

    def overhead(self, run: Run) -> None:
        limit = min(run.limit_s, self.left())
        out = self.work / "module_ranges.json"
        cmd = [
            sys.executable,
            str(ROOT / "benchmarks" / "module_ranges.py"),
            "--out",
            str(out),
            "--budget",
            f"{max(limit - 60, 0):.0f}",
        ]
        if self.dry:
            cmd += ["--cpu", "--case", "llama-7b decode static", "--target-s", "0.001"]
        self.log(f"--- {run.id}: {' '.join(cmd[1:])}  (limit {limit:.0f} s, {self.elapsed():.0f} s elapsed)")
        rc, lines, wall = self.child(cmd, limit)
        entry: dict = {
            "rc": rc,
            "wall_s": round(wall, 1),
            "status": "ok" if rc == 0 else ("timeout" if rc == "timeout" else "failed"),
        }
        if out.exists():
            d = json.loads(out.read_text())
            entry["cases"] = {
                c["name"]: {
                    k: (c.get(k) or {}).get("overhead") if k in ("plain", "profiled") else c.get(k)
                    for k in ("plain", "profiled", "error", "skipped")
                }
                for c in d.get("cases", [])
            }
        else:
            entry["error_tail"] = lines[-15:]
        for line in lines:
            if not line.startswith(("W1", "I1", "USDT")):
                self.log(f"    {line}")
        self.results["runs"][run.id] = entry

    def main(self) -> None:
        self.log(f"headroom GPU capture: budget {self.budget:.0f} s, work dir {self.work}, dry={self.dry}")
        env = env_info()
        self.log(f"environment: {json.dumps(env)}")
        self.results["environment"] = env
        for run in plan(self.dry):
            if self.only is not None and run.id not in self.only:
                continue
            if self.left() < run.minimum_s:
                self.results["runs"][run.id] = {
                    "status": "skipped",
                    "reason": f"{self.left():.0f} s left of the budget",
                }
                self.log(f"--- {run.id}: skipped ({self.left():.0f} s left)")
                continue
            (self.overhead if run.id == "module-ranges-overhead" else self.profile)(run)
        self.finish()

    def finish(self) -> None:
        R = self.results["runs"]
        ok = lambda k: R.get(k) if R.get(k, {}).get("status") == "ok" else None  # noqa: E731
        self.results["layers_check"] = {
            "prefill": layers_check(ok("llama-7b"), ok("llama-7b-layers4")),
            "decode": layers_check(ok("llama-7b-decode"), ok("llama-7b-decode-layers4")),
        }
        self.results["profiler_overhead"] = {
            k: v.get("overhead") for k, v in R.items() if v.get("status") == "ok" and "overhead" in v
        }
        files: list[str] = []
        try:
            files += self.pack()
        except Exception as e:
            self.results["pack_error"] = f"{type(e).__name__}: {e}"
        (self.out / "targets.json").write_text(json.dumps(self.targets, indent=1, default=str) + "\n")
        files.append("targets.json")
        if (self.work / "module_ranges.json").exists():
            shutil.copy(self.work / "module_ranges.json", self.out / "module_ranges.json")
            files.append("module_ranges.json")
        self.results["files"] = files + ["results.json", "capture.log"]
        self.results["elapsed_s"] = round(self.elapsed(), 1)
        (self.out / "results.json").write_text(json.dumps(self.results, indent=2, default=str) + "\n")
        self.log("")
        self.log(
            f"{'run':<26} {'status':<8} {'step ms':>9} {'overhead':>9} {'idle':>6} {'addr.':>6} "
            f"{'modules':>7}  top module (share of GPU time)"
        )
        for k, v in R.items():
            if v.get("status") == "ok" and "step_ms" in v:
                self.log(
                    f"{k:<26} {'ok':<8} {v['step_ms']:>9.2f} {100 * v['overhead']:>+8.1f}% "
                    f"{100 * v['idle_fraction']:>5.1f}% {100 * v['addressable_fraction']:>5.1f}% "
                    f"{v['module_calls']:>7}  {v.get('top_module') or ''}"
                )
            elif v.get("status") == "ok":
                for name, c in (v.get("cases") or {}).items():
                    plain, prof = c.get("plain"), c.get("profiled")
                    self.log(
                        f"{'  overhead: ' + name:<36} "
                        + (
                            f"plain {100 * plain:+.2f}%  profiled {100 * prof:+.2f}%"
                            if plain is not None and prof is not None
                            else str(c.get("error") or c.get("skipped"))
                        )
                    )
            else:
                self.log(f"{k:<26} {v.get('status'):<8} {v.get('reason') or (v.get('error_tail') or [''])[-1][:90]}")
        for phase, chk in self.results["layers_check"].items():
            if chk:
                self.log(
                    f"--layers 4 vs 32 ({phase}): max |diff| {chk['max_abs_diff_pp']:.2f} pp "
                    f"({'within' if chk['within_1pp'] else 'NOT within'} 1 pp)"
                )
        self.log(f"wrote {', '.join(self.results['files'])} to {self.out} in {self.elapsed():.0f} s")
        self.log_file.close()
        shutil.copy(self.work / "capture.log", self.out / "capture.log")
        if (self.out / "capture.log").stat().st_size > MAX_FILE:
            with open(self.out / "capture.log", "r+b") as f:
                f.truncate(MAX_FILE)
        shutil.rmtree(self.work, ignore_errors=True)

    def pack(self) -> list[str]:
        """traces/ into tars of at most 15 MB (manifest in the first); checks/ and scaling/ into one."""
        ship_dir = self.work / "traces"
        ship = sorted(ship_dir.glob("*.json.gz")) if ship_dir.exists() else []
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
        files = []
        for i, g in enumerate(groups[:4], 1):
            name = self.out / f"traces-{i}.tar"
            with tarfile.open(name, "w") as tar:
                for f in g:
                    tar.add(f, arcname=f"traces/{f.name}")
                if i == 1 and (ship_dir / "manifest.json").exists():
                    tar.add(ship_dir / "manifest.json", arcname="traces/manifest.json")
            files.append(name.name)
        extra = []
        checks = self.work / "checks"
        if checks.exists():
            extra += [(f, f"traces/checks/{f.name}") for f in sorted(checks.glob("*.json.gz"))]
            if (checks / "manifest.json").exists():
                extra.append((checks / "manifest.json", "traces/checks/manifest.json"))
        for flavour in ("13b", "70b"):
            d = self.work / f"scaling-{flavour}"
            if d.exists():
                extra += [(f, f"traces/scaling/{f.name}") for f in sorted(d.glob("*.json.gz"))]
                if (d / "manifest.json").exists():
                    extra.append((d / "manifest.json", f"traces/scaling/manifest-{flavour}.json"))
        self.results["trace_sizes_mb"] = {
            f.name: round(f.stat().st_size / 2**20, 2) for f in ship + [f for f, _ in extra if f.name.endswith(".gz")]
        }
        if extra and sum(f.stat().st_size for f, _ in extra) < MAX_FILE:
            with tarfile.open(self.out / "checks.tar", "w") as tar:
                for f, arc in extra:
                    tar.add(f, arcname=arc)
            files.append("checks.tar")
        return files


def command_line(workload: str, opts: dict) -> str:
    flags = []
    for k, v in opts.items():
        flags.append(f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')} {v}")
    return " ".join(["headroom profile", workload, *flags])


def env_info() -> dict:
    info: dict = {}
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except Exception as e:
        info["nvidia_smi"] = f"unavailable: {e}"
    probe = (
        "import json, importlib.metadata as m, torch\n"
        "v = {}\n"
        "for p in ('torch','transformers','torchrec','fbgemm-gpu','fbgemm-gpu-cpu','msgspec','polars',"
        "'google-re2','nvtx','pandas'):\n"
        "    try: v[p] = m.version(p)\n"
        "    except Exception: v[p] = None\n"
        "v['cuda'] = torch.version.cuda; v['cuda_available'] = torch.cuda.is_available()\n"
        "try:\n"
        "    import headroom.workloads._torchrec as d; v['fbgemm_cuda'] = d.fbgemm_cuda_status()\n"
        "except Exception as e: v['fbgemm_cuda'] = repr(e)\n"
        "print(json.dumps(v))\n"
    )
    try:
        p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
        info["packages"] = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else p.stderr[-2000:]
    except Exception as e:
        info["packages"] = f"probe failed: {e}"
    return info


def summarize(d: dict) -> dict:
    an = d["analysis"]
    m = d["manifest"]
    tm = m["timing"]  # the manifest's timing, in ms (`--json`'s own `timing` is in µs, docs/cli.md)
    rows = d["targets"]["module:self"]["targets"]
    out = {
        "trace": Path(d["trace"]).name,
        "variant": m.get("variant"),
        "batch": m.get("batch"),
        "seq": m.get("seq"),
        "dtype": m.get("dtype"),
        "step_ms": tm["timed"]["median_ms"],
        "step_ms_min": tm["timed"]["min_ms"],
        "step_ms_max": tm["timed"]["max_ms"],
        "profiled_step_ms": tm["profiled"]["median_ms"],
        "overhead": tm["overhead"],
        "overhead_measurable": d["timing"]["overhead_measurable"],
        "trace_step_ms": an["step_us"] / 1000,
        "idle_fraction": an["idle_fraction"],
        "addressable_fraction": an["addressable_fraction"],
        "mode": an["mode"],
        "categories": {c["name"]: c["fraction"] for c in an["categories"]},
        "module_ranges": m.get("module_ranges"),
        "module_calls": d.get("module_calls"),
        "top_module": f"{rows[0]['name']} ({100 * rows[0]['share']:.1f}%)" if rows else None,
        "peak_memory_gb": m.get("peak_memory_gb"),
        "params": m.get("params"),
        "info": m.get("info"),
        "gpu": m.get("gpu"),
        "wall_s": d.get("wall_s"),
    }
    if d.get("layers"):
        L = d["layers"]
        out["layers"] = {
            k: L[k]
            for k in (
                "built_layers",
                "total_layers",
                "block_share",
                "step_us",
                "step_us_extrapolated",
                "timed_step_ms_extrapolated",
                "addressable_fraction",
                "idle_fraction",
            )
        }
        out["layers"]["categories"] = {c["name"]: c["fraction"] for c in L["categories"]}
    return out


def layers_check(full: dict | None, part: dict | None) -> dict | None:
    """Extrapolated (4 of 32 blocks) vs measured (32 blocks) category fractions, in percentage points."""
    if not full or not part or not part.get("layers"):
        return None
    meas = full["categories"]
    ext = part["layers"]["categories"]
    names = sorted(set(meas) | set(ext), key=lambda n: -meas.get(n, 0.0))
    rows = {
        n: {
            "full_32": round(100 * meas.get(n, 0.0), 3),
            "extrapolated_from_4": round(100 * ext.get(n, 0.0), 3),
            "diff_pp": round(100 * (ext.get(n, 0.0) - meas.get(n, 0.0)), 3),
        }
        for n in names
    }
    worst = max((abs(r["diff_pp"]) for r in rows.values()), default=0.0)
    L = part["layers"]
    return {
        "max_abs_diff_pp": worst,
        "within_1pp": worst <= 1.0,
        "categories": rows,
        "addressable_full": full["addressable_fraction"],
        "addressable_extrapolated": L["addressable_fraction"],
        "step_ms_full": full["step_ms"],
        "step_ms_extrapolated": L["timed_step_ms_extrapolated"],
        "step_ms_4_layers": part["step_ms"],
        "block_share_4_layers": L["block_share"],
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["--run"]:
        return run_one(argv[1])
    dry = "--dry" in argv
    only = None
    if "--only" in argv:
        only = set(argv[argv.index("--only") + 1].split(","))
    positional = [a for i, a in enumerate(argv) if not a.startswith("--") and (i == 0 or argv[i - 1] != "--only")]
    if not positional:
        print("usage: gpu_capture.py OUT [BUDGET_S] [--dry] [--only ID,ID]", file=sys.stderr)
        return 2
    out = Path(positional[0])
    out.mkdir(parents=True, exist_ok=True)
    budget = float(positional[1]) if len(positional) > 1 else 530.0
    Capture(out, budget, dry, only).main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
