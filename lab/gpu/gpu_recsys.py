#!/usr/bin/env python3
"""DLRM-Bench on one GPU (the H200), one command: the recommender traces, coverage, the suite, the scenario.

    bash lab/gpu/gpu_recsys.sh                          # on the GPU machine, from the repository root (OUT=...)
    python3 lab/gpu/gpu_recsys.py --out /tmp/rs --dry-run   # the same pipeline on a CPU, tiny shapes
    python3 lab/gpu/gpu_recsys.py --render docs/gpu/recsys --traces traces/  # docs/dlrm-bench.md's tables
    python3 lab/gpu/gpu_recsys.py --render docs/gpu/recsys --traces traces/ --write-docs   # ... written into it

Each step starts only while the budget has room for it and is recorded in recsys.json as it finishes
(a run cut short still returns what finished). The steps, run in the order 0, a, b, d (measure), c,
d (project):

0. check: fbgemm-gpu's CUDA kernels run, and DLRM-Bench 01's reference is fbgemm's TBE on the device;
a. `headroom profile deepfm | din | dlrm-int8` at their GPU scale, module ranges on (the default);
b. `headroom coverage --suite dlrm --json` over the new traces and the shipped traces/;
c. DLRM-Bench: every problem against its honest candidate (the API, one problem at a time; the
   scenario's problems first), with the suite's aggregates (headroom.suites.scoring); `--problems` runs
   a subset into bench-part.json.gz (a second command for what a first one had no time for);
d. the scenario: `headroom validate dlrm --replace InteractionArch=...` (the interaction forward and
   backward, DLRM-Bench 04 + 05 in torchrec's layout), measured end to end beside `headroom project
   --speedups` of the bench results for the problems it replaces (on the validate run's base trace), and
   the suite's conclusive wins (`pass`, 95% interval above 1) projected onto each recommender trace.

`--render DIR --traces traces/` recomputes the coverage and the projections on a CPU from the committed
traces (and validate.tar.gz's base trace) with the current selectors; without --traces it shows the run's own.

Writes under --out (default $OUT), 8 files at most: recsys.json (everything, incremental), recsys.log,
coverage.json, bench.json.gz (the suite document with "aggregates"; bench-part.json.gz with --problems),
validate.tar.gz (the validate runs'
directories), and the three traces (<workload>.<variant>.json.gz).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

WORKLOADS = [("deepfm", 70), ("din", 50), ("dlrm-int8", 60)]  # name, estimated seconds on the H200
# name, workload, module class, candidate, the DLRM-Bench problems it stands for, estimated seconds.
# Not here: 07's candidate in deepfm (its in-place ops break autograd in a training step), 11's in dlrm-int8
# (its state_dict, a column index, is not the workload module's), 12's in din (no MLP, another forward).
SUBSTITUTIONS = [
    (
        "dlrm-interaction",
        "dlrm",
        "InteractionArch",
        "examples/substitutions/dlrm_interaction.py",
        ["04_DotInteraction", "05_DotInteractionBackward"],
        90,
    ),
]
BENCH_EST = 35  # seconds per problem on the H200
PROJECT_RESERVE = 40  # seconds kept for the projections at the end
MAX_BYTES = 16 << 20
DOC = REPO / "docs" / "dlrm-bench.md"
BEGIN, END = "<!-- recsys-results:begin -->", "<!-- recsys-results:end -->"


class Run:
    def __init__(self, out: Path, budget: float, dry: bool):
        self.out, self.budget, self.dry = out, budget, dry
        self.t0 = time.monotonic()
        self.log_f = open(out / "recsys.log", "a", buffering=1)
        self.doc: dict[str, Any] = {
            "device": "cpu (dry run)" if dry else "cuda",
            "dry_run": dry,
            "budget_s": budget,
            "steps": {},
            "skipped": [],
        }

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    def log(self, text: str) -> None:
        print(text, flush=True)
        self.log_f.write(text + "\n")

    def save(self) -> None:
        self.doc["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        tmp = self.out / ".recsys.json.tmp"
        tmp.write_text(json.dumps(self.doc, indent=1, default=str) + "\n")
        os.replace(tmp, self.out / "recsys.json")

    def fits(self, what: str, est: float) -> bool:
        if self.left() < est:
            self.log(f"== {what}: skipped ({self.left():.0f} s left, ~{est:.0f} s needed)")
            self.doc["skipped"].append({"what": what, "left_s": round(self.left()), "needed_s": est})
            self.save()
            return False
        return True

    def headroom(self, args: list[str], timeout: float) -> tuple[int, str, float]:
        """`headroom ARGS` in a child (this interpreter); its stderr logged; (status, stdout, seconds)."""
        self.log(f"$ headroom {' '.join(shlex.quote(a) for a in args)}")
        t = time.monotonic()
        try:
            p = subprocess.run(
                [sys.executable, "-m", "headroom.cli", *args],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=max(timeout, 5.0),
            )
        except subprocess.TimeoutExpired:
            self.log(f"  timed out after {timeout:.0f} s")
            return 124, "", time.monotonic() - t
        for line in p.stderr.splitlines()[-40:]:
            if "USDT:" not in line:
                self.log(f"  {line[:300]}")
        dt = time.monotonic() - t
        self.log(f"  -> exit {p.returncode} in {dt:.1f} s")
        return p.returncode, p.stdout, dt

    def step(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run one step; an exception is recorded, never the end of the run."""
        t = time.monotonic()
        try:
            rec = fn()
        except Exception as e:  # noqa: BLE001 - one step must not stop the others
            rec = {"status": f"script error: {type(e).__name__}: {e}"[:400]}
        rec = rec if isinstance(rec, dict) else {"value": rec}
        rec.setdefault("status", "ok")
        rec["seconds"] = round(time.monotonic() - t, 1)
        self.doc["steps"][name] = rec
        self.save()
        self.log(f"== {name}: {rec['status']} in {rec['seconds']} s")
        return rec


def parse_json(out: str) -> Any:
    text = out.strip()
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def check(run: Run) -> dict:
    """fbgemm's CUDA kernels, and what DLRM-Bench 01's reference builds on the device."""
    code = (
        "import json, os, sys, torch\n"
        "dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "from headroom.workloads._torchrec import fbgemm_cuda_status\n"
        "ok, why = fbgemm_cuda_status()\n"
        "os.environ['HEADROOM_BENCH_SCALE'] = 'cpu'\n"
        "import importlib.util as u\n"
        "s = u.spec_from_file_location('p01', 'headroom/suites/dlrm/problems/01_EmbeddingBagSum.py')\n"
        "m = u.module_from_spec(s); s.loader.exec_module(m)\n"
        "with torch.device(dev):\n"
        "    model = m.Model(*m.get_init_inputs())\n"
        "tbe = getattr(model, 'tbe', None)\n"
        "w = tbe.split_embedding_weights()[0] if tbe is not None else None\n"
        "print(json.dumps({'device': dev, 'gpu': torch.cuda.get_device_name() if dev == 'cuda' else None,\n"
        "  'torch': torch.__version__, 'fbgemm_cuda': ok, 'fbgemm': why, 'p01_reference': m.REFERENCE,\n"
        "  'p01_tbe': type(tbe).__name__ if tbe is not None else None,\n"
        "  'p01_weights_on': str(w.device) if w is not None else None}))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    rec = parse_json(p.stdout) or {"status": f"exit {p.returncode}: {p.stderr.strip()[-300:]}"}
    if isinstance(rec, dict) and not run.dry and rec.get("device") == "cuda":
        if not (
            rec.get("fbgemm_cuda") and rec.get("p01_tbe") and str(rec.get("p01_weights_on", "")).startswith("cuda")
        ):
            rec["status"] = "WARNING: DLRM-Bench 01's reference is not fbgemm's TBE on CUDA here"
    return rec


def profile(run: Run, workload: str, traces: Path) -> dict:
    tiny = ["--flavour", "tiny", "--device", "cpu"] if run.dry else []
    rc, out, _ = run.headroom(["profile", workload, *tiny, "--out", str(traces), "--json"], min(run.left(), 240))
    doc = parse_json(out) if rc == 0 else None
    if not isinstance(doc, dict):
        return {"status": f"profile failed (exit {rc})"}
    man = doc.get("manifest") or {}
    name = man.get("trace") or ""
    trace = traces / name
    if not name or not trace.is_file():
        return {"status": "profile wrote no trace", "manifest": man}
    size = trace.stat().st_size
    rec: dict[str, Any] = {
        "trace": name,
        "bytes": size,
        "info": man.get("info"),
        "timing": man.get("timing"),
        "peak_memory_gb": man.get("peak_memory_gb"),
        "gpu": man.get("gpu"),
        "versions": man.get("versions"),
        "analysis": {
            k: (doc.get("analysis") or {}).get(k) for k in ("addressable_fraction", "idle_fraction", "categories")
        },
    }
    if size > MAX_BYTES:
        rec["status"] = f"trace is {size / 2**20:.1f} MiB, over the 16 MiB a file may have: not returned"
    else:
        shutil.copy2(trace, run.out / name)
    return rec


def coverage(run: Run, traces: Path) -> dict:
    rc, out, _ = run.headroom(
        ["coverage", "--suite", "dlrm", str(traces), str(REPO / "traces"), "--json"], min(run.left(), 120)
    )
    doc = parse_json(out)
    if not isinstance(doc, dict):
        return {"status": f"coverage failed (exit {rc})"}
    (run.out / "coverage.json").write_text(json.dumps(doc, indent=1) + "\n")
    return {
        "matched": doc.get("matched"),
        "problems_total": doc.get("problems_total"),
        "unmatched": doc.get("unmatched"),
        "exit": rc,
    }


def bench_order(only: list[str] | None) -> list[str]:
    """The problems the scenario's substitutions stand for first (a run cut short still projects them),
    then the rest in order; `only`: names or numbers of a subset."""
    from headroom.suites import dlrm

    names = [dlrm.get(n).name for n in only] if only else list(dlrm.NAMES)
    first = [p for sub in SUBSTITUTIONS for p in sub[4] if p in names]
    return first + [n for n in names if n not in first]


def bench(run: Run, work: Path, only: list[str] | None = None) -> dict:
    """DLRM-Bench problems against their honest candidates, one at a time; the document after each."""
    from headroom.jsonio import plain
    from headroom.suites import dlrm
    from headroom.suites.scoring import score
    from headroom.verify import VerifyOptions

    merged: dict[str, Any] = {}
    results: list[dict] = []
    done: list[str] = []
    target = run.out / ("bench-part.json.gz" if only else "bench.json.gz")
    for name in bench_order(only):
        if not run.fits(f"bench {name}", BENCH_EST + PROJECT_RESERVE):
            break
        opts = VerifyOptions(device="cpu", threads=1) if run.dry else VerifyOptions()
        opts.timeout = opts.reference_timeout = min(120.0, max(run.left() - PROJECT_RESERVE, 10.0))
        t = time.monotonic()
        try:
            doc = dlrm.run([name], options=opts)
        except Exception as e:  # noqa: BLE001
            run.log(f"  {name}: {type(e).__name__}: {e}"[:300])
            results.append(
                {
                    "problem": name,
                    "candidate": f"{name}.py",
                    "verdict": "error",
                    "reason": f"script: {type(e).__name__}: {e}"[:300],
                }
            )
            continue
        merged = {k: v for k, v in doc.items() if k not in ("results", "aggregates")}
        results.extend(doc.get("results") or [])
        done.append(name)
        r = (doc.get("results") or [{}])[0]
        run.log(
            f"  {name}: {r.get('verdict')} speedup {r.get('speedup')} memory {r.get('memory_ratio')} "
            f"({time.monotonic() - t:.0f} s)"
        )
        merged["results"] = results
        merged["problems_run"] = list(done)
        merged["aggregates"] = plain(score(merged))
        _write_gz(target, merged)
        _free_gpu()
    if not results:
        return {"status": "no problem ran"}
    merged["results"] = results
    merged["problems_run"] = done
    merged["problems_not_run"] = [n for n in bench_order(only) if n not in done]
    merged["aggregates"] = agg = plain(score(merged))
    _write_gz(target, merged)
    (work / "bench.json").write_text(json.dumps(merged))
    return {
        "problems_run": len(done),
        "aggregates": {k: v for k, v in agg.items() if k != "per_problem"},
        "per_problem": agg["per_problem"],
    }


def _free_gpu() -> None:
    """The harness keeps each reference in this process: give its memory back before the next problem."""
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - freeing is best effort
        pass


def _write_gz(path: Path, doc: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with gzip.open(tmp, "wt") as f:
        json.dump(doc, f, default=str)
    os.replace(tmp, path)


def validate(run: Run, work: Path, name: str, workload: str, module: str, candidate: str) -> dict:
    tiny = ["--flavour", "tiny", "--device", "cpu", "--threads", "1"] if run.dry else []
    rdir = work / "validate" / name
    budget = max(run.left() - PROJECT_RESERVE, 30)
    rc, out, _ = run.headroom(
        [
            "validate",
            workload,
            *tiny,
            "--replace",
            f"{module}={candidate}",
            "--out",
            str(rdir),
            "--json",
            "--timeout",
            str(int(budget)),
        ],
        budget + 15,
    )
    res = parse_json(out)
    if rc != 0 or not isinstance(res, dict):
        return {"status": f"validate failed (exit {rc})"}
    return {
        "workload": workload,
        "module": module,
        "candidate": candidate,
        "run_dir": str(rdir),
        **{k: res.get(k) for k in ("measured", "part", "projected", "error", "baseline", "replacements")},
        "check": {k: (res.get("check") or {}).get(k) for k in ("passed", "dtype", "gate")},
    }


def project(run: Run, trace: Path, bench_json: Path, problems: list[str] | None, work: Path) -> dict:
    """`headroom project TRACE --speedups` of the bench results (only `problems`' when given)."""
    doc = json.loads(bench_json.read_text())
    if problems is not None:
        doc = {**doc, "results": [r for r in doc["results"] if r["problem"] in problems]}
    else:
        # The suite substituted: only conclusive wins (a slower candidate would not be integrated).
        doc = {**doc, "results": [r for r in doc["results"] if conclusive_win(r) or run.dry]}
    promoted = []
    if run.dry:
        # A CPU's timing is mostly inconclusive: the dry run projects the point estimates, to prove the plumbing.
        rs = []
        for r in doc["results"]:
            est = (r.get("timing") or {}).get("speedup_estimate")
            if r.get("verdict") == "inconclusive" and isinstance(est, (int, float)):
                r = {**r, "verdict": "pass", "speedup": est}
                promoted.append(r["problem"])
            rs.append(r)
        doc = {**doc, "results": rs}
    sp = work / f"speedups-{abs(hash((str(trace), tuple(problems or ())))) % 10**8}.json"
    sp.write_text(json.dumps(doc))
    passed = sorted({r["problem"] for r in doc["results"] if r.get("verdict") == "pass"})
    if not passed:
        return {"status": "no passing bench result to project", "trace": str(trace), "problems": problems}
    rc, out, _ = run.headroom(["project", str(trace), "--speedups", str(sp), "--json"], min(run.left(), 90))
    pj = parse_json(out)
    if rc != 0 or not isinstance(pj, dict):
        return {"status": f"project failed (exit {rc})", "trace": str(trace)}
    proj = {p["method"]: p["speedup"] for p in pj.get("projections", []) if p.get("scenario") == "speedups"}
    est = pj.get("estimate") or {}
    return {
        "trace": str(trace.relative_to(REPO) if trace.is_relative_to(REPO) else trace.name),
        "problems": passed,
        "amdahl": proj.get("amdahl"),
        "replay": proj.get("replay"),
        "estimate": est.get("speedup"),
        "low": est.get("low"),
        "high": est.get("high"),
        "entries": pj.get("entries"),
        "warnings": pj.get("warnings"),
        **({"dry_run_estimates_projected": promoted} if promoted else {}),
    }


def scenario_validate(run: Run, work: Path) -> None:
    for name, workload, module, cand, _problems, est in SUBSTITUTIONS:
        if run.fits(f"validate {name}", 30 if run.dry else est):
            run.step(f"validate {name}", lambda: validate(run, work, name, workload, module, cand))
    archive(run, work / "validate")


def scenario_project(run: Run, work: Path, traces: Path) -> None:
    """Each measured substitution beside the projection of its problems' bench speedups; the whole suite's
    verified speedups projected onto every recommender trace."""
    bench_json = work / "bench.json"
    if not bench_json.is_file():
        return
    for name, _workload, _module, _cand, problems, _est in SUBSTITUTIONS:
        rec = run.doc["steps"].get(f"validate {name}") or {}
        base = Path(rec.get("run_dir", "")) / "base.json.gz"
        if rec.get("status") == "ok" and base.is_file() and run.left() > 10:
            pr = run.step(f"project {name}", lambda: project(run, base, bench_json, problems, work))
            measured = (rec.get("measured") or {}).get("speedup")
            for k in ("amdahl", "estimate"):
                if pr.get(k) and measured:
                    pr[f"error_{k}"] = pr[k] / measured - 1
            run.save()
    shipped = [
        REPO / "traces" / "dlrm.train.json.gz",
        REPO / "traces" / "dlrm-dcn.train.json.gz",
        *sorted(traces.glob("*.json.gz")),
    ]
    for t in shipped:
        if t.is_file() and run.left() > 8:
            run.step(f"project suite {t.name}", lambda: project(run, t, bench_json, None, work))


def archive(run: Run, vdir: Path) -> None:
    if not vdir.is_dir() or not any(vdir.iterdir()):
        return
    tmp = run.out / ".validate.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for d in sorted(vdir.iterdir()):
            tar.add(d, arcname=d.name)
    os.replace(tmp, run.out / "validate.tar.gz")


def summary(run: Run) -> None:
    s = run.doc["steps"]
    run.log("== summary")
    for name, rec in s.items():
        run.log(f"  {name:<40} {rec.get('status')}  ({rec.get('seconds')} s)")
    cov = s.get("coverage", {})
    if cov.get("matched") is not None:
        run.log(f"  coverage: {cov['matched']}/{cov['problems_total']} matched; unmatched {cov.get('unmatched')}")
    agg = (s.get("bench") or {}).get("aggregates")
    if agg:
        run.log(
            f"  bench: {agg['problems']} problems, {agg['correct']} correct, {agg['wins']} wins; geomean "
            f"{agg['geomean_speedup']}, median win {agg['median_win']}, fast_p {agg['fast_p']}, peak memory "
            f"{agg['peak_memory_ratio']}"
        )
    files = sorted(p.name for p in run.out.iterdir() if p.is_file() and not p.name.startswith("."))
    sizes = {f: (run.out / f).stat().st_size for f in files}
    run.doc["files"] = sizes
    over = [f for f, b in sizes.items() if b > MAX_BYTES]
    run.log(
        f"  files ({len(files)}): "
        + ", ".join(f"{f} {b / 2**20:.2f} MiB" for f, b in sizes.items())
        + (f"; OVER 16 MiB: {over}" if over else "")
    )
    run.save()


RECSYS_TRACES = ["dlrm.train", "dlrm-dcn.train", "deepfm.train", "din.train", "dlrm-int8.infer"]
PAPER = (0.417, 1.552, 0.0863)  # the paper's DLRM-Bench win rate, median win, and projected end to end


def conclusive_win(r: dict) -> bool:
    """A `pass` whose speedup's 95% interval lies above 1."""
    ci = r.get("speedup_ci") or (r.get("timing") or {}).get("speedup_ci") or [None]
    return r.get("verdict") == "pass" and isinstance(ci[0], (int, float)) and ci[0] > 1


def load_results(folder: Path) -> tuple[dict, dict, dict]:
    """recsys.json, coverage.json and the bench document (bench.json.gz or bench.json) of a results folder."""
    doc = json.loads((folder / "recsys.json").read_text())
    cov_path = folder / "coverage.json"
    cov = json.loads(cov_path.read_text()) if cov_path.is_file() else {}
    bench_doc: dict = {}
    for path in sorted(folder.glob("bench*.json.gz")):  # bench.json.gz, then bench-part.json.gz
        with gzip.open(path, "rt") as f:
            part = json.load(f)
        if not bench_doc:
            bench_doc = part
            continue
        bench_doc = {
            **bench_doc,
            "results": bench_doc.get("results", []) + part.get("results", []),
            "problems_run": bench_doc.get("problems_run", []) + part.get("problems_run", []),
        }
    return doc, cov, bench_doc


def _x(v: Any, digits: int = 3) -> str:
    return f"{v:.{digits}g}x" if isinstance(v, (int, float)) else "-"


def _pct(v: Any) -> str:
    return f"{100 * v:.2f}%" if isinstance(v, (int, float)) else "-"


def _gain(v: Any) -> str:
    return f"{100 * (v - 1):+.2f}%" if isinstance(v, (int, float)) else "-"


def _trace_name(path: str) -> str:
    name = Path(path).name
    return name[: -len(".json.gz")] if name.endswith(".json.gz") else name


def coverage_of(traces: Path) -> dict:
    """coverage.json's fields, recomputed from the traces in `traces` with the current selectors (on a CPU)."""
    from headroom.projection.coverage import coverage as suite_coverage
    from headroom.trace.analysis import analyze

    c = suite_coverage([analyze(t) for t in sorted(traces.glob("*.json.gz"))], suite="dlrm")
    return {
        "matched": c.matched_count,
        "problems_total": c.problems_total,
        "unmatched": c.unmatched,
        "problems": [
            {
                "name": p.name,
                "matches": [
                    {
                        "trace": m.trace,
                        "mode": m.mode,
                        "share": m.share,
                        "top": [{"name": n, "us": u} for n, u in m.top],
                    }
                    for m in p.matches
                ],
            }
            for p in c.problems
        ],
    }


def _speedups_file(bench_doc: dict, keep: Callable[[dict], bool], where: Path) -> Path:
    path = where / f"speedups-{len(list(where.iterdir()))}.json"
    path.write_text(json.dumps({**bench_doc, "results": [r for r in bench_doc["results"] if keep(r)]}))
    return path


def scenario_recomputed(folder: Path, bench_doc: dict) -> list[dict]:
    """Each substitution's projection recomputed from its committed base trace (validate.tar.gz) and the
    bench results of its problems, with the current selectors; the part's kernel time per step."""
    import tempfile

    import headroom
    from headroom.projection.matching import select

    out: list[dict] = []
    tar_path = folder / "validate.tar.gz"
    if not tar_path.is_file() or not bench_doc.get("results"):
        return out
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        with tarfile.open(tar_path) as tar:
            tar.extractall(where, filter="data")
        for name, _wl, module, _cand, problems, _est in SUBSTITUTIONS:
            base = where / name / "base.json.gz"
            if not base.is_file():
                continue
            a = headroom.analyze(base, read=headroom.ReadOptions(use_cache=False))
            steps = a.num_steps or 1
            sp = _speedups_file(bench_doc, lambda r: r["problem"] in problems, where)
            pr = headroom.project(a, files=[sp])
            assert not isinstance(pr, list)
            amdahl = pr.get("amdahl")
            est = pr.estimate
            parts = [
                {
                    "problem": str(e.selector).split(":", 1)[-1],
                    "speedup": e.speedup,
                    "ms_per_step": e.applied_us / steps / 1e3,
                }
                for e in pr.entries
            ]
            ev = a.events
            module_ms = float(ev["dur"][select(ev, f"module:{module}")].sum()) / steps / 1e3
            out.append(
                {
                    "name": name,
                    "module": module,
                    "amdahl": amdahl.speedup if amdahl else None,
                    "estimate": est.speedup if est else None,
                    "parts": parts,
                    "module_ms": module_ms,
                }
            )
    return out


def suite_projection(traces: Path, bench_doc: dict) -> list[dict]:
    """Per recommender trace: the conclusive wins substituted (Amdahl, estimate), and the paper's scenario,
    a win rate x median win over the addressable time, with this suite's numbers and with the paper's."""
    import tempfile

    import headroom
    from headroom.suites.scoring import score

    agg = score(bench_doc)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        sp = _speedups_file(bench_doc, conclusive_win, Path(tmp))
        for name in RECSYS_TRACES:
            path = traces / f"{name}.json.gz"
            if not path.is_file():
                continue
            a = headroom.analyze(path)
            pr = headroom.project(a, files=[sp])
            ours = headroom.project(a, win_rate=agg.win_rate, median=agg.median_win)
            paper = headroom.project(a, win_rate=PAPER[0], median=PAPER[1])
            assert not isinstance(pr, list) and not isinstance(ours, list) and not isinstance(paper, list)
            hit = [str(e.selector).split(":", 1)[-1].split("_")[0] for e in pr.entries if e.applied_us > 0]
            am, wo, wp = (
                pr.get("amdahl"),
                ours.get("amdahl", "win_rate_x_median"),
                paper.get("amdahl", "win_rate_x_median"),
            )
            rows.append(
                {
                    "trace": name,
                    "problems": hit,
                    "amdahl": am.speedup if am else None,
                    "estimate": pr.estimate.speedup if pr.estimate else None,
                    "ours": wo.speedup if wo else None,
                    "paper": wp.speedup if wp else None,
                }
            )
    return rows


def render(folder: Path, traces: Path | None = None) -> str:
    """The Markdown of docs/dlrm-bench.md's results section, from a results folder; with `traces`, the
    coverage, the scenario's projection and the suite's projections are recomputed on a CPU from the
    committed traces (`traces`, and the base trace in validate.tar.gz) with the current selectors."""
    from headroom.suites.scoring import score

    doc, cov, bench_doc = load_results(folder)
    if traces is not None:
        cov = coverage_of(traces)
    steps = doc.get("steps", {})
    chk = steps.get("check", {})
    lines = [
        f"Device: {chk.get('gpu') or chk.get('device')}, torch {chk.get('torch')}, {chk.get('fbgemm')}; "
        f"DLRM-Bench 01's reference: {chk.get('p01_reference')} ({chk.get('p01_tbe') or 'no TBE'}, weights on "
        f"{chk.get('p01_weights_on')})"
        + ("; **CPU dry run (tiny shapes), not GPU results**" if doc.get("dry_run") else "")
        + ".",
        "",
    ]
    lines += ["| workload | trace | step | peak memory | embedding path |", "|---|---|---:|---:|---|"]
    for name, rec in steps.items():
        if name.startswith("profile ") and rec.get("trace"):
            info = rec.get("info") or {}
            step_ms = (rec.get("timing") or {}).get("step_ms")
            mem = rec.get("peak_memory_gb")
            lines.append(
                f"| {name.split(' ', 1)[1]} | {_trace_name(rec['trace'])} | "
                f"{f'{step_ms:.1f} ms' if isinstance(step_ms, (int, float)) else '-'} | "
                f"{f'{mem:.1f} GB' if isinstance(mem, (int, float)) else '-'} | "
                f"{info.get('embedding_path', '-')} |"
            )
    if cov:
        lines += [
            "",
            f"Coverage{' of traces/, recomputed from the committed traces' if traces else ''}: "
            f"{cov.get('matched')} of {cov.get('problems_total')} problems matched"
            + (f" (unmatched: {', '.join(cov['unmatched'])})" if cov.get("unmatched") else "")
            + ".",
            "",
            "| problem | trace | share | of | top kernels |",
            "|---|---|---:|---|---|",
        ]
        for p in cov.get("problems", []):
            first = True
            for m in p.get("matches", []):
                of = "GPU time" if m.get("mode") == "gpu" else "CPU op time"
                top = ", ".join(f"`{t['name'][:70]}`" for t in (m.get("top") or [])[:2])
                lines.append(
                    f"| {p['name'] if first else ''} | {_trace_name(m['trace'])} | {_pct(m.get('share'))} | "
                    f"{of} | {top} |"
                )
                first = False
            if first:
                lines.append(f"| {p['name']} | - | | | no trace exercises it |")
    if bench_doc.get("results"):
        agg = score(bench_doc)
        ran = {r["problem"] for r in bench_doc["results"]}
        not_run = [n for n in bench_doc.get("problems_not_run") or [] if n not in ran]
        lines += [
            "",
            f"DLRM-Bench ({bench_doc.get('scale')} scale, {bench_doc.get('device')}), the honest candidates"
            + (
                f"; not run in the budget: {', '.join(not_run)} (the scores are over the {len(ran)} that ran)"
                if not_run
                else ""
            )
            + ":",
            "",
            "| problem | verdict | speedup | peak memory |",
            "|---|---|---:|---:|",
        ]
        for q in agg.per_problem:
            lines.append(f"| {q.problem} | {q.verdict} | {_x(q.speedup)} | {_x(q.memory_ratio)} |")
        fp = agg.fast_p
        lines += [
            "",
            "| problems | correct | wins | win rate | geomean speedup | median win | fast_1.0 | fast_1.5 | "
            "fast_2.0 | peak memory (geomean, max) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {agg.problems} | {agg.correct} | {agg.wins} | {agg.win_rate:.1%} | {_x(agg.geomean_speedup)} | "
            f"{_x(agg.median_win)} | {fp['1.0']:.1%} | {fp['1.5']:.1%} | {fp['2.0']:.1%} | "
            f"{_x(agg.peak_memory_ratio)}, {_x(agg.peak_memory_ratio_max)} |",
        ]
    rows = []
    recomputed = {r["name"]: r for r in scenario_recomputed(folder, bench_doc)} if traces else {}
    for name, wl, module, _cand, problems, _est in SUBSTITUTIONS:
        v = steps.get(f"validate {name}")
        if not v:
            continue
        pr = dict(steps.get(f"project {name}", {}))
        rc = recomputed.get(name)
        if rc:
            meas = (v.get("measured") or {}).get("speedup")
            pr = {
                "amdahl": rc["amdahl"],
                "estimate": rc["estimate"],
                "error_estimate": rc["estimate"] / meas - 1 if rc["estimate"] and meas else None,
            }
        meas = v.get("measured") or {}
        ci = meas.get("ci") or [None, None]
        rows.append(
            f"| {wl} | {module} ({', '.join(p.split('_')[0] for p in problems)}) | "
            + (
                f"{_gain(meas.get('speedup'))} [{_gain(ci[0])}, {_gain(ci[1])}] | "
                if v.get("status") == "ok"
                else f"{v.get('status')} | "
            )
            + f"{_gain(pr.get('amdahl'))} | {_gain(pr.get('estimate'))} | "
            + (f"{100 * pr['error_estimate']:+.2f}%" if pr.get("error_estimate") is not None else "-")
            + " |"
        )
    if rows:
        lines += [
            "",
            "| workload | replaced (problems) | measured end to end [95% CI] | projected from the bench "
            "(Amdahl) | projected (estimate) | error of the estimate |",
            "|---|---|---:|---:|---:|---:|",
            *rows,
        ]
    for name, rc in recomputed.items():
        v = steps.get(f"validate {name}") or {}
        part, proj = v.get("part") or {}, v.get("projected") or {}
        lines += [
            "",
            f"The substituted part, {rc['module']} (forward and backward), per step of the base trace:",
            "",
            "| kernels | time per step | speedup over them | end to end (Amdahl) |",
            "|---|---:|---:|---:|",
        ]
        if part.get("speedup"):
            lines.append(
                f"| {rc['module']} substituted, in the model (validate's base and variant traces) | "
                f"{part['base_us'] / 1e3:.2f} ms | {_x(part['speedup'])} | {_gain(proj.get('amdahl'))} |"
            )
        for q in rc["parts"]:
            lines.append(
                f"| DLRM-Bench {q['problem']} (its selectors) | {q['ms_per_step']:.2f} ms | {_x(q['speedup'])} | |"
            )
        total = sum(q["ms_per_step"] for q in rc["parts"])
        after = sum(q["ms_per_step"] / q["speedup"] for q in rc["parts"])
        if after > 0:
            lines.append(
                f"| the bench's together | {total:.2f} ms (of the module's {rc['module_ms']:.2f} ms) | "
                f"{_x(total / after)} | {_gain(rc['amdahl'])} |"
            )
    if traces is not None and bench_doc.get("results"):
        agg = score(bench_doc)
        lines += [
            "",
            f"The suite substituted: each trace with the conclusive wins only (`pass`, 95% interval above 1); "
            f"then the paper's scenario (a win rate x median win over the addressable time, Amdahl) with this "
            f"suite's {agg.win_rate:.1%} x {_x(agg.median_win)} and the paper's {PAPER[0]:.1%} x {PAPER[1]:.4g}x "
            f"(its claim: {100 * PAPER[2]:.2f}% end to end):",
            "",
            "| trace | conclusive wins that matched | Amdahl | estimate | ours: win rate x median (Amdahl) | "
            "the paper's (Amdahl) |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in suite_projection(traces, bench_doc):
            lines.append(
                f"| {r['trace']} | {', '.join(r['problems']) or '-'} | {_gain(r['amdahl'])} | "
                f"{_gain(r['estimate'])} | {_gain(r['ours'])} | {_gain(r['paper'])} |"
            )
        return "\n".join(lines) + "\n"
    suite = [(k.split(" ", 2)[2], r) for k, r in steps.items() if k.startswith("project suite ")]
    if suite:
        lines += ["", "| trace | verified problems that matched | Amdahl | estimate |", "|---|---|---:|---:|"]
        for t, r in suite:
            hit = [
                str(e.get("selector", "")).split(":", 1)[-1].split("_")[0]
                for e in r.get("entries") or []
                if (e.get("applied_us") or 0) > 0
            ]
            lines.append(
                f"| {_trace_name(t)} | {', '.join(hit) or '-'} | "
                f"{_gain(r.get('amdahl'))} | {_gain(r.get('estimate'))} |"
            )
    return "\n".join(lines) + "\n"


def write_docs(doc_path: Path, md: str) -> None:
    """Replace the block between the results markers of docs/dlrm-bench.md with `md`."""
    text = doc_path.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc_path.write_text(f"{head}{BEGIN}\n{md.strip()}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out/gpu_recsys"))
    ap.add_argument("--budget", type=float, default=500.0, help="seconds: no step starts that would not fit")
    ap.add_argument("--dry-run", action="store_true", help="on a CPU: tiny flavours, DLRM-Bench at --scale cpu")
    ap.add_argument("--parts", default="abcd", help="which of the steps a, b, c, d to run (default all)")
    ap.add_argument(
        "--problems",
        nargs="*",
        help="DLRM-Bench problems to run (names or numbers; default all 12): "
        "writes bench-part.json.gz, which --render merges with bench.json.gz",
    )
    ap.add_argument("--render", metavar="DIR", help="print docs/dlrm-bench.md's tables of a results folder and exit")
    ap.add_argument(
        "--traces",
        metavar="DIR",
        help="with --render: recompute the coverage and the projections "
        "from the committed traces in DIR (traces/) with the current selectors",
    )
    ap.add_argument("--write-docs", action="store_true", help="with --render: write them into docs/dlrm-bench.md")
    args = ap.parse_args(argv)
    if args.render:
        md = render(Path(args.render), Path(args.traces) if args.traces else None)
        if args.write_docs:
            write_docs(DOC, md)
            print(f"{DOC.relative_to(REPO)}: results block rewritten from {args.render}")
        else:
            print(md)
        return 0
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(REPO) + (os.pathsep + old if old else "")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # one-rank NCCL group for torchrec DMP: no NVLink multicast
    if args.dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / ".work"
    shutil.rmtree(work, ignore_errors=True)
    (work / "traces").mkdir(parents=True)
    run = Run(out, args.budget, args.dry_run)
    run.save()
    run.step("check", lambda: check(run))
    traces = work / "traces"
    if "a" in args.parts:
        for workload, est in WORKLOADS:
            if run.fits(f"profile {workload}", 25 if args.dry_run else est):
                run.step(f"profile {workload}", lambda: profile(run, workload, traces))
    if "b" in args.parts and run.fits("coverage", 20):
        run.step("coverage", lambda: coverage(run, traces))
    # The scenario's measurement before the suite: the suite runs while the budget lasts (its problems for
    # the substitutions first), the projections of both at the end.
    if "d" in args.parts:
        scenario_validate(run, work)
    if "c" in args.parts:
        run.step("bench", lambda: bench(run, work, args.problems))
    if "d" in args.parts:
        scenario_project(run, work, traces)
    summary(run)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
