"""What module ranges cost: step time with and without them, interleaved, without and under the profiler.

    python lab/probes/module_ranges.py [--cpu] [--rounds 7] [--out FILE.json] [--budget S] [--case NAME ...]

For each case the workload is built once; then, for R rounds (at least 7), the same step
runs with no module ranges (A: no hooks) and with them (B: `record_module_ranges` on the
step's model, as `headroom profile` records them), alternating the order (A B, B A, A B, ...)
so drift cannot favour either. Each measurement is the median of k steps (CUDA events on a
GPU, a wall clock on the CPU; k chosen so a measurement takes ~0.3 s). Two settings:

* plain: no profiler active (the hooks only check a flag);
* profiled: each measurement inside its own torch.profiler session (CPU + CUDA activities,
  record_shapes, as `headroom profile` runs), one step of warm-up in the session, then k.

The overhead is the median over rounds of B/A - 1 with its 95% order-statistics interval (headroom.measure).
The first profiled round also counts the module ranges the profiler recorded per step
(0 for A: a check that A and B are what they say).

Cases (GPU, the real sizes): llama-7b prefill, llama-7b decode (static cache), resnet-50
train, dlrm train. `--cpu`: the same workloads at their `tiny` flavours (a test of the script).
Prints a table; writes JSON (default: benchmarks/results/module_ranges_cost.json).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from headroom.devices import resolve_device  # noqa: E402
from headroom.jsonio import plain  # noqa: E402
from headroom.measure import compare, round_order  # noqa: E402
from headroom.profile.modules import ranged_modules, record_module_ranges  # noqa: E402
from headroom.profile.registry import get_workload  # noqa: E402
from headroom.profile.run import MODULE_ROOT  # noqa: E402
from headroom.profile.timer import _sync, _Timer  # noqa: E402
from headroom.profile.workload import Options  # noqa: E402
from headroom.trace.ranges import MODULE_RANGE_PREFIX  # noqa: E402

MIN_ROUNDS = 7
TARGET_S = 0.3  # wall time one measurement aims for


@dataclass
class Case:
    name: str
    workload: str
    options: dict[str, Any]
    gpu_bound: bool  # from the shipped H200 traces (docs/gpu-results.md)
    cpu_options: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case("llama-7b prefill", "llama-7b", {}, True, {"flavour": "tiny", "batch": 1, "seq": 32}),
    Case(
        "llama-7b decode static",
        "llama-7b",
        {"phase": "decode", "kv_cache": "static"},
        False,
        {"flavour": "tiny", "batch": 1, "seq": 32},
    ),
    Case("resnet-50 train", "resnet-50", {"mode": "train"}, True, {"flavour": "tiny", "batch": 2}),
    Case("dlrm train", "dlrm", {}, True, {"flavour": "tiny", "batch": 64}),
]


def _measure(step: Any, device: Any, k: int, profiled: bool, count_ranges: bool = False) -> tuple[float, int | None]:
    """Median step time (ms) of k steps; with `count_ranges`, also module ranges recorded per step."""
    timer = _Timer(device)
    if not profiled:
        for _ in range(k):
            with timer.step():
                step()
        return timer.results().median_ms, None
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        step()  # warm-up inside the session
        _sync(device)
        for _ in range(k):
            with timer.step():
                step()
        _sync(device)
    count = None
    if count_ranges:
        # The raw Kineto events (prof.events() would build Python objects for all of them first).
        names = [e.name() for e in prof.profiler.kineto_results.events()]
        count = sum(n.startswith(MODULE_RANGE_PREFIX) for n in names) // (k + 1)
    del prof
    if device.type == "cuda":
        torch.cuda.synchronize()
    return timer.results().median_ms, count


def run_case(case: Case, device: Any, rounds: int, cpu: bool, target_s: float = TARGET_S) -> dict[str, Any]:
    import torch

    spec = get_workload(case.workload)
    opts = dict(case.cpu_options if cpu else case.options)
    if cpu:
        opts.update({k: v for k, v in case.options.items() if k not in opts})
    cfg = spec.resolve(Options(**opts), device.type)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
        torch.backends.cudnn.allow_tf32 = cfg.tf32
    torch.manual_seed(0)
    t0 = time.perf_counter()
    step = spec.build(cfg, device)
    build_s = time.perf_counter() - t0
    try:
        root = step.modules
        n_modules = len(ranged_modules(root, MODULE_ROOT))
        # Warm up with the hooks on and off (lazy init, allocator, autotuning), then size k.
        hooks = record_module_ranges(root, MODULE_ROOT)
        for _ in range(2):
            step()
        for h in hooks:
            h.remove()
        _sync(device)
        t = time.perf_counter()
        for _ in range(3):
            step()
        _sync(device)
        step_s = (time.perf_counter() - t) / 3
        k = max(3, min(50, math.ceil(target_s / max(step_s, 1e-6))))
        calls = _calls_per_step(step, root)

        out: dict[str, Any] = {
            "name": case.name,
            "workload": case.workload,
            "config": plain(cfg),
            "gpu_bound": case.gpu_bound,
            "modules_with_ranges": n_modules,
            "module_calls_per_step": calls,
            "steps_per_measurement": k,
            "build_s": round(build_s, 2),
            "rounds": rounds,
        }
        for setting in ("plain", "profiled"):
            off, on, order, counted = [], [], [], {}
            for r in range(rounds):
                sequence = tuple(round_order(["off", "on"], r))
                order.append("".join("A" if c == "off" else "B" for c in sequence))
                for cond in sequence:
                    hooks = record_module_ranges(root, MODULE_ROOT) if cond == "on" else []
                    try:
                        ms, n = _measure(step, device, k, setting == "profiled", count_ranges=r == 0)
                    finally:
                        for h in hooks:
                            h.remove()
                    (on if cond == "on" else off).append(ms)
                    if n is not None:
                        counted[cond] = n
            ratios = [b / a for a, b in zip(off, on)]
            c = compare(on, off)  # headroom.measure: median ratio, order-statistics interval
            lo, hi = (c.low, c.high) if c.low is not None else (float("nan"), float("nan"))
            out[setting] = {
                "off_ms": off,
                "on_ms": on,
                "order": order,
                "ratios": ratios,
                "off_median_ms": statistics.median(off),
                "on_median_ms": statistics.median(on),
                "overhead": statistics.median(ratios) - 1.0,
                "ci95": [lo - 1.0, hi - 1.0],
            }
            if counted:
                out[setting]["module_ranges_per_step"] = {"off": counted.get("off"), "on": counted.get("on")}
        return out
    finally:
        step.close()
        del step
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _calls_per_step(step: Any, root: Any) -> int:
    """Calls of the ranged modules in one step (forward pre-hooks fired)."""
    count = [0]
    handles = [
        m.register_forward_pre_hook(lambda *_: count.__setitem__(0, count[0] + 1))
        for _, m in ranged_modules(root, MODULE_ROOT)
    ]
    try:
        step()
    finally:
        for h in handles:
            h.remove()
    return count[0]


def _machine(device: Any) -> dict[str, Any]:
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "host": platform.node(),
        "cpu_count": __import__("os").cpu_count(),
        "device": device.type,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def table(results: dict[str, Any]) -> str:
    lines = [
        f"{'case':<24} {'modules':>7} {'calls':>6} {'k':>3}  {'plain off ms':>12} {'overhead':>9} "
        f"{'95% CI':>17}  {'profiled off ms':>15} {'overhead':>9} {'95% CI':>17}  <1% (GPU-bound)"
    ]
    for c in results["cases"]:
        if "error" in c or "skipped" in c:
            lines.append(f"{c['name']:<24} {c.get('error') or c.get('skipped')}")
            continue
        p, q = c["plain"], c["profiled"]

        def ci(x):
            return f"[{100 * x['ci95'][0]:+.2f}, {100 * x['ci95'][1]:+.2f}]%"

        verdict = ("yes" if p["overhead"] < 0.01 else "NO") if c["gpu_bound"] else "n/a (launch-bound)"
        lines.append(
            f"{c['name']:<24} {c['modules_with_ranges']:>7} {c['module_calls_per_step']:>6} "
            f"{c['steps_per_measurement']:>3}  {p['off_median_ms']:>12.3f} {100 * p['overhead']:>+8.2f}% "
            f"{ci(p):>17}  {q['off_median_ms']:>15.3f} {100 * q['overhead']:>+8.2f}% {ci(q):>17}  {verdict}"
        )
    return "\n".join(lines)


def _write(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="tiny flavours on the CPU (tests the script)")
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "module_ranges_cost.json")
    ap.add_argument(
        "--budget", type=float, default=float("inf"), help="seconds; cases that would start later are skipped"
    )
    ap.add_argument("--case", action="append", default=None, help="run only these cases (by name)")
    ap.add_argument("--target-s", type=float, default=TARGET_S, help="seconds one measurement aims for (k >= 3 steps)")
    args = ap.parse_args(argv)
    if args.rounds < MIN_ROUNDS:
        print(f"module_ranges: error: --rounds must be at least {MIN_ROUNDS}", file=sys.stderr)
        return 2
    device = resolve_device("cpu" if args.cpu else "auto")
    cases = [c for c in CASES if not args.case or c.name in args.case]
    if not cases:
        print(
            f"module_ranges: error: no case named {args.case}; cases: {', '.join(c.name for c in CASES)}",
            file=sys.stderr,
        )
        return 2
    t0 = time.monotonic()
    results: dict[str, Any] = {
        "command": " ".join(["python lab/probes/module_ranges.py", *(argv or sys.argv[1:])]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(device),
        "cases": [],
    }
    for case in cases:
        if time.monotonic() - t0 > args.budget:
            results["cases"].append({"name": case.name, "skipped": f"budget of {args.budget:.0f} s spent"})
            continue
        t = time.monotonic()
        try:
            r = run_case(case, device, args.rounds, args.cpu, args.target_s)
        except Exception as e:  # one case failing must not lose the others
            r = {"name": case.name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
        r["wall_s"] = round(time.monotonic() - t, 1)
        results["cases"].append(r)
        print(f"{case.name}: {r.get('error') or 'done'} in {r['wall_s']} s", file=sys.stderr, flush=True)
        results["elapsed_s"] = round(time.monotonic() - t0, 1)
        _write(args.out, results)  # after every case: a run cut short keeps what it measured
    _write(args.out, results)
    print(table(results))
    return 0 if all("error" not in c for c in results["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
