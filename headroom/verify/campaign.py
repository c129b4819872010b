"""The GPU verification campaign behind ``scripts/gpu_verify.sh``.

Verifies, on one device, within a time budget:

1. the 12 DLRM-Bench problems (full size): the shipped honest candidate of each,
   plus the cheaters in ``tests/cheaters/dlrm/<problem>/``;
2. the KernelBench level-1-style problems in ``benchmarks/kernelbench_l1/``
   with every candidate in ``candidates/<problem>/`` (honest ones and
   ``cheat_*`` ones).

Each problem's reference (truth, TF32 and strict-FP32 timings) is prepared
once and shared by its candidates. Files written to ``--out`` (rewritten after
every problem, so a run cut short still leaves its results):

- ``verify_results.json``: every result (suite format, each result with
  ``suite``, ``kind`` = honest|cheat and ``expected``), plus the TF32-vs-FP32
  baseline of every problem;
- ``dlrm_bench_speedups.json``: the honest DLRM-Bench results only (one per
  problem), the file ``headroom project --speedups`` reads.

Usage (needs only torch and the standard library)::

    python3 -m headroom.verify.campaign --out OUT [--budget 400] [--only NAME ...]
    python3 -m headroom.verify.campaign --render OUT/verify_results.json   # Markdown tables for docs/
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _plan(repo: Path, only: list[str] | None, scale: str) -> list[dict]:
    from headroom import bench

    items: list[dict] = []
    dlrm_cheats = repo / "tests" / "cheaters" / "dlrm"
    for p in bench.PROBLEMS:
        cands = [bench.CANDIDATES_DIR / f"{p.name}.py"]
        sub = dlrm_cheats / p.name
        if sub.is_dir():
            cands += sorted(sub.glob("cheat_*.py"))
        items.append({"suite": "DLRM-Bench", "problem": p.path, "candidates": cands,
                      "env": {bench.SCALE_ENV: scale}})
    l1 = repo / "benchmarks" / "kernelbench_l1"
    from headroom.verify.harness import _natural

    for prob in sorted(l1.glob("*.py"), key=_natural):
        sub = l1 / "candidates" / prob.stem
        cands = sorted(sub.glob("*.py"), key=lambda c: (c.stem.startswith("cheat_"), "compile" in c.stem, c.stem))
        if cands:
            items.append({"suite": "KernelBench-L1", "problem": prob, "candidates": cands,
                          "env": {bench.SCALE_ENV: scale}})
    if only:
        items = [it for it in items if it["problem"].stem in only or it["problem"].stem.split("_")[0] in only]
    return items


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="directory for verify_results.json and dlrm_bench_speedups.json")
    ap.add_argument("--budget", type=float, default=400.0, help="seconds; no new work starts after this")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds per candidate")
    ap.add_argument("--only", nargs="*", help="problem names (or numbers) to run")
    ap.add_argument("--scale", default="full", choices=("full", "cpu"), help="problem sizes (cpu: a quick dry run)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads in the children")
    ap.add_argument("--render", metavar="RESULTS", help="print Markdown tables of a verify_results.json and exit")
    args = ap.parse_args(argv)
    if args.render:
        import json

        print(render_markdown(json.loads(Path(args.render).read_text())))
        return 0
    if not args.out:
        ap.error("--out is required")

    import torch

    from headroom.verify import VerifyOptions, prepare_reference, suite_document, verify_candidate, write_json
    from headroom.verify.harness import VerifyResult, _drop_logs, _free_device_memory

    import signal

    def _terminate(signum, frame):  # `timeout` sends TERM: unwind, so the running child is killed
        raise SystemExit(124)

    signal.signal(signal.SIGTERM, _terminate)
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {msg}", flush=True)

    device_name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    log(f"torch {torch.__version__}, device {device_name}, python {sys.version.split()[0]}")
    items = _plan(REPO, args.only, args.scale)
    results: list[dict] = []
    baselines: list[dict] = []
    skipped: list[str] = []

    def save() -> None:
        doc = suite_document([], device_name, baselines=baselines, skipped=skipped,
                             elapsed_s=round(time.monotonic() - t0, 1))
        doc["results"] = results
        write_json(doc, out / "verify_results.json")
        honest = [r for r in results if r["suite"] == "DLRM-Bench" and r["kind"] == "honest"]
        write_json({**suite_document([], device_name, suite="DLRM-Bench", scale=args.scale), "results": honest},
                   out / "dlrm_bench_speedups.json")

    for it in items:
        name = it["problem"].stem
        if time.monotonic() - t0 > args.budget:
            skipped.append(name)
            log(f"{name}: skipped (time budget)")
            continue
        opts = VerifyOptions(device=args.device, iters=args.iters, warmup=args.warmup, timeout=args.timeout,
                             env=dict(it["env"]), threads=args.threads)
        try:
            ref = prepare_reference(it["problem"], opts, progress=log)
        except Exception as e:  # a broken problem must not end the campaign
            log(f"{name}: reference failed: {type(e).__name__}: {e}")
            for c in it["candidates"]:
                results.append({**VerifyResult(name, str(c), "error", reason=f"reference: {e}").to_dict(),
                                "suite": it["suite"], "kind": _kind(c), "expected": _expected(c)})
            save()
            continue
        rt = ref.timing.get("tf32", {}).get("stats", {}).get("median")
        rf = ref.timing.get("fp32", {}).get("stats", {}).get("median")
        baselines.append({"problem": name, "suite": it["suite"], "tf32_ms": rt, "fp32_ms": rf,
                          "fp32_over_tf32": (rf / rt) if rt and rf else None, "error": ref.error})
        log(f"{name}: reference TF32 {_ms(rt)}, strict FP32 {_ms(rf)}"
            + (f" (TF32 is {rf / rt:.2f}x faster)" if rt and rf else "") + (f" ERROR {ref.error}" if ref.error else ""))
        try:
            for c in it["candidates"]:
                if time.monotonic() - t0 > args.budget:
                    skipped.append(f"{name}/{c.name}")
                    log(f"{name} <- {c.name}: skipped (time budget)")
                    continue
                try:
                    r = verify_candidate(it["problem"], c, opts, reference=ref).to_dict()
                except Exception as e:
                    traceback.print_exc()
                    r = VerifyResult(name, str(c), "error", reason=f"harness: {type(e).__name__}: {e}").to_dict()
                r.update(suite=it["suite"], kind=_kind(c), expected=_expected(c))
                r["candidate"] = os.path.relpath(r["candidate"], REPO)
                results.append(r)
                ok = (r["verdict"] == "pass") == (r["kind"] == "honest")
                failed = [ch["name"] for ch in r["checks"] if not ch["passed"]]
                log(f"{name} <- {c.name}: {r['verdict']} "
                    + (f"{r['speedup']:.3g}x (vs FP32 {r['speedup_fp32']:.3g}x) mem {r['memory_ratio'] or 0:.2f}x "
                       if r["speedup"] else "")
                    + (f"failed: {', '.join(failed)} " if failed else "")
                    + (f"reason: {r['reason'][:160]} " if r["verdict"] == "error" else "")
                    + (f"flags: {', '.join(f['name'] for f in r['flags'])} " if r["flags"] else "")
                    + ("[as expected]" if ok else "[UNEXPECTED]"))
        finally:
            _drop_logs(ref)
            del ref
            _free_device_memory()
            save()

    _summary(results, baselines, log)
    save()
    log(f"wrote {out / 'verify_results.json'} and {out / 'dlrm_bench_speedups.json'}")
    return 0


def _kind(path: Path) -> str:
    return "cheat" if Path(path).stem.startswith("cheat_") else "honest"


def _expected(path: Path) -> str:
    return "fail or error" if _kind(path) == "cheat" else "pass"


def _ms(x: float | None) -> str:
    return f"{x:.4g} ms" if x else "-"


def _summary(results: list[dict], baselines: list[dict], log) -> None:
    log("TF32 vs strict FP32 baseline (reference medians):")
    for b in baselines:
        ratio = f"{b['fp32_over_tf32']:.2f}x" if b["fp32_over_tf32"] else "-"
        log(f"  {b['problem']:<50} TF32 {_ms(b['tf32_ms']):>12}  FP32 {_ms(b['fp32_ms']):>12}  FP32/TF32 {ratio}")
    log("results:")
    for r in results:
        sp = f"{r['speedup']:.3g}x" if r.get("speedup") else "-"
        sp32 = f"{r['speedup_fp32']:.3g}x" if r.get("speedup_fp32") else "-"
        kb = r.get("info", {}).get("kernelbench_allclose")
        log(f"  {r['problem']:<46} {Path(r['candidate']).name:<28} {r['kind']:<6} {r['verdict']:<5} "
            f"speedup {sp:>7} (vs FP32 {sp32:>7}) KernelBench-allclose {kb}")
    honest = [r for r in results if r["kind"] == "honest"]
    cheats = [r for r in results if r["kind"] == "cheat"]
    log(f"honest: {sum(r['verdict'] == 'pass' for r in honest)}/{len(honest)} pass; "
        f"cheats: {sum(r['verdict'] != 'pass' for r in cheats)}/{len(cheats)} caught "
        f"({sum(bool(r.get('info', {}).get('kernelbench_allclose')) for r in cheats)} of them pass KernelBench's allclose)")


def render_markdown(doc: dict) -> str:
    """The baseline and results tables of a campaign's verify_results.json, as Markdown (for docs/)."""

    def x(v: float | None) -> str:
        return f"{v:.2f}x" if isinstance(v, (int, float)) else "-"

    def ms(v: float | None) -> str:
        return f"{v:.3f}" if isinstance(v, (int, float)) else "-"

    lines = [f"Device: {doc.get('device')}; campaign time {doc.get('elapsed_s')} s"
             + (f"; skipped (time budget): {', '.join(doc['skipped'])}" if doc.get("skipped") else ""), "",
             "| problem | suite | reference TF32 (ms) | reference strict FP32 (ms) | FP32 / TF32 |",
             "|---|---|---:|---:|---:|"]
    for b in doc.get("baselines", []):
        lines.append(f"| {b['problem']} | {b['suite']} | {ms(b['tf32_ms'])} | {ms(b['fp32_ms'])} | "
                     f"{x(b['fp32_over_tf32'])} |")
    lines += ["", "| problem | candidate | kind | verdict | speedup vs TF32 | vs strict FP32 | memory | "
                  "KernelBench allclose | failed checks / reason | flags |",
              "|---|---|---|---|---:|---:|---:|---|---|---|"]
    for r in doc.get("results", []):
        failed = ", ".join(c["name"] for c in r.get("checks", []) if not c["passed"])
        why = failed or (r.get("reason") or "")[:80] if r["verdict"] != "pass" else ""
        kb = r.get("info", {}).get("kernelbench_allclose")
        lines.append(f"| {r['problem']} | {Path(r['candidate']).name} | {r.get('kind', '')} | {r['verdict']} | "
                     f"{x(r.get('speedup'))} | {x(r.get('speedup_fp32'))} | {x(r.get('memory_ratio'))} | "
                     f"{'-' if kb is None else ('pass' if kb else 'fail')} | {why} | "
                     f"{', '.join(f['name'] for f in r.get('flags', []))} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
