"""Which sealing mechanism stops the harness from mapping a sealed child's CUDA IPC outputs
(`mapping of buffer object failed` on some GPU machines): `headroom verify` of an honest candidate
(`ModelNew = Model`, KernelBench level 1 GELU, shrunk) once with the whole seal, once with each mechanism
turned off alone (`HEADROOM_VERIFY_SEAL_OFF=<name>`), once with all of it off. Each setting runs in a fresh
process. Writes the verdict, reason, failed checks and the harness's notes per setting to --out.

    PYTHONPATH=. python lab/probes/seal_ipc_probe.py --out /tmp/seal_ipc.json [--kernelbench DIR]

Needs a CUDA GPU (exits 2 without one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SETTINGS = ["", "ns", "fds", "seccomp", "tmpfs", "copy", "cgroup", "split", "swap", "uid", "all"]

CHILD = r"""
import json, sys
from headroom.verify import VerifyOptions, verify_candidate
from headroom.verify.timing import Policy
policy = Policy(rounds=6, max_rounds=8, budget_s=6.0, calibration_phases=2, target_phase_ms=5.0)
r = verify_candidate(sys.argv[1], sys.argv[2], VerifyOptions(device="cuda", policy=policy))
print("RESULT " + json.dumps({"verdict": r.verdict, "reason": r.reason, "speedup": r.speedup,
      "failed": [c.name for c in r.checks if not c.passed], "sandbox": r.info.get("sandbox"),
      "elapsed_s": r.elapsed_s}, default=str))
"""


def _setting(problem: Path, candidate: Path, off: str, limit: float) -> dict:
    env = {**os.environ, "HEADROOM_VERIFY_SEAL_OFF": off, "PYTHONPATH": f"{os.environ.get('PYTHONPATH', '')}:{REPO}"}
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            [sys.executable, "-c", CHILD, str(problem), str(candidate)],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=limit,
        )
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        out = (
            json.loads(line[7:])
            if line
            else {"verdict": f"no result (rc {p.returncode})", "tail": (p.stdout + p.stderr)[-1200:]}
        )
    except subprocess.TimeoutExpired:
        out = {"verdict": "timed out"}
    out["seal_off"] = off or "(nothing: the whole seal)"
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument(
        "--kernelbench", default=None, help="KernelBench checkout (default: .kb, then ../shared/kernelbench)"
    )
    ap.add_argument("--settings", nargs="*", default=SETTINGS, help="HEADROOM_VERIFY_SEAL_OFF values ('' = none)")
    ap.add_argument("--limit", type=float, default=60.0, help="seconds per setting")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import torch

    from lab.probes.verify_graphs import IDENTICAL, PROBLEMS, kernelbench, shrunk

    if not torch.cuda.is_available():
        print("seal_ipc_probe: no CUDA GPU here; the CUDA IPC mapping needs one", file=sys.stderr)
        return 2
    kb = kernelbench(args.kernelbench)
    if kb is None:
        print(
            "seal_ipc_probe: no KernelBench checkout (a folder with level1/); give --kernelbench DIR", file=sys.stderr
        )
        return 2
    work = Path(tempfile.mkdtemp(prefix="headroom-seal-ipc-"))
    work.chmod(0o755)
    fname, sizes = PROBLEMS["gelu"]
    src = shrunk((kb / "level1" / fname).read_text(), sizes)
    problem, candidate = work / "gelu.py", work / "gelu_identical.py"
    problem.write_text(src)
    candidate.write_text(src + IDENTICAL)
    for p in (problem, candidate):
        p.chmod(0o644)
    driver = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()
    runs = []
    for off in args.settings:
        r = _setting(problem, candidate, off, args.limit)
        runs.append(r)
        print(f"SEAL_OFF={off or '-'}: {r['verdict']} {str(r.get('reason') or '')[:200]} ({r['wall_s']} s)", flush=True)
    doc = {
        "tool": "lab/probes/seal_ipc_probe.py",
        "device": torch.cuda.get_device_name(0),
        "driver": driver,
        "torch": torch.__version__,
        "kernel": os.uname().release,
        "runs": runs,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
