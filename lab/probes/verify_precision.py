"""How precise `headroom verify`'s clock is on this machine: an identical candidate and one that does twice
the work, against a 1024 x 1024 fp32 matrix product, run as a user runs them (the CLI), alternated.

    python lab/probes/verify_precision.py [--repeat 3] [--threads N] [--rounds N] [--out FILE.json]

Each repeat runs `headroom verify lab/probes/verify_precision/matmul_1k.py CANDIDATE --json --device cpu
--scale full` for both candidates (order alternating between repeats); ``--rounds N`` passes verify's
minimum rounds (a CPU's default maximum is 30: a 2-core machine's interval is about +-4-6% there, and
its width shrinks as 1/sqrt(rounds)). Prints one line per run and writes
the verdicts, speedups, intervals, rounds and the machine's load to FILE.json (default
benchmarks/results/verify_precision_cpu.json). Targets (docs/verify.md): identical inside [0.95, 1.05],
twice the work conclusively near 0.5x.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = REPO / "benchmarks" / "verify_precision"


def one(cand: str, threads: int | None, rounds: int | None = None) -> dict:
    cmd = (
        [
            sys.executable,
            "-m",
            "headroom.cli",
            "verify",
            str(HERE / "matmul_1k.py"),
            str(HERE / f"{cand}.py"),
            "--json",
            "--device",
            "cpu",
            "--scale",
            "full",
        ]
        + (["--threads", str(threads)] if threads else [])
        + (["--rounds", str(rounds)] if rounds else [])
    )
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=900)
    v = json.loads(p.stdout)
    t = v.get("timing") or {}
    return {
        "candidate": cand,
        "verdict": v["verdict"],
        "speedup": v.get("speedup") or t.get("speedup_estimate"),
        "ci": v.get("speedup_ci") or t.get("speedup_ci"),
        "rounds": t.get("rounds"),
        "rounds_stop": t.get("rounds_stop"),
        "iters_per_phase": t.get("iters_per_phase"),
        "overhead_share": t.get("overhead_share"),
        "wait_fraction": t.get("wait_fraction"),
        "reason": v.get("reason"),
        "seconds": round(time.monotonic() - t0, 1),
        "load_before": load0,
        "load_after": os.getloadavg()[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None, help="verify's minimum rounds (at least 6)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "verify_precision_cpu.json"))
    a = ap.parse_args()
    runs = []
    for r in range(a.repeat):
        for cand in ("identical", "twice") if r % 2 == 0 else ("twice", "identical"):
            res = one(cand, a.threads, a.rounds)
            runs.append(res)
            ci = res["ci"] or [float("nan")] * 2
            print(
                f"{cand:9s} {res['verdict']:12s} {res['speedup'] or float('nan'):.3f}x [{ci[0]:.3f}, {ci[1]:.3f}] "
                f"rounds {res['rounds']} ({res['rounds_stop']}), load {res['load_before']:.2f}, "
                f"{res['seconds']} s",
                flush=True,
            )
    doc = {
        "machine": platform.node(),
        "cpus": os.cpu_count(),
        "date": datetime.now(timezone.utc).isoformat(),
        "command": " ".join(["python", "lab/probes/verify_precision.py", *sys.argv[1:]]),
        "runs": runs,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
