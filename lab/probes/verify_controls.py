"""Honest controls of ``headroom verify``: what it says of a kernel identical to the reference and of one
doing twice the work, on a few problems (docs/verify.md, "Honest controls").

    PYTHONPATH=. python lab/probes/verify_controls.py --out docs/verify-controls/cpu.json
    PYTHONPATH=. python lab/probes/verify_controls.py --out /tmp/c.json --problems gelu_linear --quick

Problems: ``matmul_1k`` (a 1024 x 1024 float32 matmul), KernelBench level 1 problem 1 (square matmul,
scaled to the CPU budget as ``verify`` does), ``linear_gelu`` (GELU of a 1024 -> 1024 linear layer on 512
rows). Candidates, each wrapping the problem's own ``Model`` (so nothing but the harness differs):
``identical`` (``ModelNew = Model``; expected: ``pass`` with a speedup in [0.95, 1.05], or ``inconclusive``
where the machine is too noisy to call) and ``twice`` (the forward run twice, the second result returned;
expected: about 0.5x, never a pass above 1). The JSON records the load average before and after each run,
the CPUs and each verdict with its interval, round orders and CPU split.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MATMUL_1K = '''"""C = A @ B, 1024 x 1024, float32."""
import torch
import torch.nn as nn

N = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
'''

LINEAR_GELU = '''"""GELU(x @ W^T + b): 512 rows, 1024 -> 1024."""
import torch
import torch.nn as nn

BATCH = 512
IN_FEATURES = 1024
OUT_FEATURES = 1024


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
'''

IDENTICAL = '''"""Control: the problem's own Model, unchanged."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _problem import problem_module  # noqa: E402

ModelNew = problem_module().Model
'''

TWICE = '''"""Control: the problem's own forward run twice, the second result returned (twice the work)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _problem import problem_module  # noqa: E402

_Model = problem_module().Model


class ModelNew(_Model):
    def forward(self, *args):
        first = super().forward(*args)
        second = super().forward(*args)
        return second if first.data_ptr() != second.data_ptr() else first
'''


def _kernelbench() -> Path | None:
    for c in (
        os.environ.get("HEADROOM_KERNELBENCH"),
        REPO.parent / "shared" / "kernelbench",
        Path("/work/shared/kernelbench"),
    ):
        if c and (Path(c) / "level1").is_dir():
            return Path(c)
    return None


def problems(work: Path) -> dict[str, Path]:
    out = {}
    (work / "matmul_1k.py").write_text(MATMUL_1K)
    out["matmul_1k"] = work / "matmul_1k.py"
    kb = _kernelbench()
    if kb is not None:
        out["kb_l1_1"] = kb / "level1" / "1_Square_matrix_multiplication_.py"
    (work / "linear_gelu.py").write_text(LINEAR_GELU)
    out["linear_gelu"] = work / "linear_gelu.py"
    out["gelu_linear"] = REPO / "tests" / "cheaters" / "problems" / "gelu_linear.py"  # the tests' small one
    return out


def candidates(work: Path) -> dict[str, Path]:
    shutil.copy(REPO / "tests" / "cheaters" / "kernelbench" / "_problem.py", work / "_problem.py")
    (work / "identical.py").write_text(IDENTICAL)
    (work / "twice.py").write_text(TWICE)
    for p in work.iterdir():
        p.chmod(0o644)
    return {"identical": work / "identical.py", "twice": work / "twice.py"}


def summarise(r) -> dict:
    t = r.timing or {}
    ci = r.speedup_ci or t.get("speedup_ci")
    split = t.get("cpu_split") or {}
    return {
        "verdict": r.verdict,
        "speedup": r.speedup,
        "speedup_estimate": t.get("speedup_estimate"),
        "speedup_ci": ci,
        "ci_width": ci[1] / ci[0] if ci and ci[0] else None,
        "order_medians": t.get("order_medians"),
        "rounds": t.get("rounds"),
        "rounds_stop": t.get("rounds_stop"),
        "iters_per_phase": t.get("iters_per_phase"),
        "reference_ms": (t.get("reference_tf32") or {}).get("median"),
        "candidate_ms": (t.get("candidate") or {}).get("median"),
        "reference_drift": t.get("reference_drift"),
        "reference_cpu_drift": t.get("reference_cpu_drift"),
        "wait_fraction": t.get("wait_fraction"),
        "cpu_split": {k: split.get(k) for k in ("reference", "candidate", "swapped", "disjoint_in_every_round")},
        "failed": [c.name for c in r.checks if not c.passed],
        "reason": r.reason,
        "scaled": (r.info or {}).get("scaled"),
        "elapsed_s": r.elapsed_s,
    }


def expected(cand: str, s: dict) -> bool:
    if s["failed"]:
        return False
    if cand == "identical":
        return s["verdict"] == "inconclusive" or (s["verdict"] == "pass" and 0.95 <= s["speedup"] <= 1.05)
    return s["verdict"] == "inconclusive" or (s["verdict"] == "pass" and s["speedup_ci"][1] < 1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--problems", nargs="*", default=["matmul_1k", "kb_l1_1", "linear_gelu"])
    ap.add_argument("--candidates", nargs="*", default=["identical", "twice"])
    ap.add_argument("--threads", type=int, default=1, help="torch threads per child (default 1: one core each)")
    ap.add_argument("--quick", action="store_true", help="VerifyOptions.quick() (the tests' 6 short rounds)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from headroom.verify import VerifyOptions, prepare_reference, verify_candidate

    work = Path(tempfile.mkdtemp(prefix="headroom-controls-"))
    work.chmod(0o755)  # the candidate's uid reads the candidates
    try:
        probs, cands = problems(work), candidates(work)
        bad = [p for p in args.problems if p not in probs] + [c for c in args.candidates if c not in cands]
        if bad:
            ap.error(f"unknown: {', '.join(bad)} (problems: {', '.join(probs)}; candidates: {', '.join(cands)})")
        runs = []
        t0 = time.monotonic()
        for name in args.problems:
            env = {"HEADROOM_TEST_PROBLEM": str(probs[name])}
            opts = (
                VerifyOptions.quick(env=env, threads=args.threads)
                if args.quick
                else VerifyOptions(device="cpu", threads=args.threads, env=env, cpu_budget_flops=4e9)
            )
            ref = prepare_reference(probs[name], opts)
            try:
                for cand in args.candidates:
                    load0 = os.getloadavg()
                    r = verify_candidate(probs[name], cands[cand], reference=ref)
                    s = {
                        "problem": name,
                        "candidate": cand,
                        "load_before": [round(x, 2) for x in load0],
                        "load_after": [round(x, 2) for x in os.getloadavg()],
                        **summarise(r),
                    }
                    s["as_expected"] = expected(cand, s)
                    runs.append(s)
                    print(
                        f"{name} <- {cand}: {s['verdict']} {s['speedup_estimate'] or float('nan'):.3f}x "
                        f"ci {s['speedup_ci']} orders {s['order_medians']} load {s['load_before'][0]} "
                        f"({'as expected' if s['as_expected'] else 'UNEXPECTED'}) {s['reason'] or ''}"[:400],
                        flush=True,
                    )
            finally:
                ref.close()
        doc = {
            "tool": "lab/probes/verify_controls.py",
            "cpus": sorted(os.sched_getaffinity(0)),
            "nproc": os.cpu_count(),
            "threads": args.threads,
            "quick": args.quick,
            "wall_s": round(time.monotonic() - t0, 1),
            "runs": runs,
            "expected": "identical: pass in [0.95, 1.05] or inconclusive; twice: pass below 1 (about 0.5) "
            "or inconclusive; never a failed check",
        }
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        print(f"{sum(r['as_expected'] for r in runs)} of {len(runs)} as expected -> {out}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
