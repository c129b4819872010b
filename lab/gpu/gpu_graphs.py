"""Capture the execution-mode traces on one GPU: llama-7b decode (batch 1 and 32) and prefill in eager, CUDA-graph
(`--graphs`) and torch.compile(reduce-overhead) modes, gpt2-xl decode under graphs.

    python3 lab/gpu/gpu_graphs.py OUT BUDGET_S RUN_ID [RUN_ID ...]     (PYTHONPATH: the carried wheels + the repo)

Each run is `headroom profile` through the API in a child process with a time limit, writing into
OUT/work/traces/graphs/ (the trace, captures/ and manifest.json); runs that no longer fit the budget are skipped.
Then OUT/graphs.tar holds that folder and OUT/results.json each run's status, step time and what the analysis
said of the replayed kernels. The product's command for one run is `headroom profile llama-7b --phase decode
--batch 1 --graphs` (docs/graphs.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

RUNS = {
    # id: (workload, options, time limit s)
    "decode-bs1-graphs": ("llama-7b", {"phase": "decode", "batch": 1, "graphs": True}, 170),
    "decode-bs1-eager": ("llama-7b", {"phase": "decode", "batch": 1}, 150),
    "decode-bs1-compiled": ("llama-7b", {"phase": "decode", "batch": 1, "compile_mode": "reduce-overhead"}, 300),
    "decode-bs32-graphs": ("llama-7b", {"phase": "decode", "batch": 32, "graphs": True}, 170),
    "decode-bs32-eager": ("llama-7b", {"phase": "decode", "batch": 32}, 150),
    "decode-bs32-compiled": ("llama-7b", {"phase": "decode", "batch": 32, "compile_mode": "reduce-overhead"}, 300),
    "gpt2xl-decode-graphs": ("gpt2-xl", {"phase": "decode", "batch": 1, "kv_cache": "static", "graphs": True}, 150),
    "gpt2xl-decode-eager": ("gpt2-xl", {"phase": "decode", "batch": 1, "kv_cache": "static"}, 150),
    "prefill-graphs": ("llama-7b", {"graphs": True}, 200),
    "prefill-eager": ("llama-7b", {}, 150),
    "prefill-compiled": ("llama-7b", {"compile_mode": "reduce-overhead"}, 300),
}

CHILD = r"""
import json, sys
from headroom.profile.run import profile_workload
from headroom.profile.workload import Options
from headroom.trace.graphs import graph_summary
workload, options, out, name = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
r = profile_workload(workload, Options(**options), device="cuda", out=out, trace_name=name,
                     command="lab/gpu/gpu_graphs.py " + sys.argv[2])
a = r.analysis
s = graph_summary(a.events)
print("RESULT " + json.dumps({"trace": r.trace_path.name, "step_ms": r.timed.median_ms,
      "profiled_ms": r.profiled.median_ms, "idle": a.idle_fraction, "addressable": a.addressable_fraction,
      "graphs": s.note() if s else None, "notes": a.notes}))
"""


def main(out: Path, budget: float, ids: list[str]) -> None:
    start = time.monotonic()
    dest = out / "work" / "traces" / "graphs"
    dest.mkdir(parents=True, exist_ok=True)
    results = {}
    log = open(out / "graphs.log", "w")
    for rid in ids:
        workload, options, limit = RUNS[rid]
        left = budget - (time.monotonic() - start)
        if left < 45:
            results[rid] = {"status": "skipped (budget)"}
            continue
        t0 = time.monotonic()
        try:
            name = f"{workload}.{rid.split('-', 1)[-1] if workload != 'llama-7b' else rid}.json.gz"
            p = subprocess.run(
                [sys.executable, "-c", CHILD, workload, json.dumps(options), str(dest), name],
                capture_output=True,
                text=True,
                timeout=min(limit, left - 15),
            )
            text = p.stdout + p.stderr
            line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
            results[rid] = {
                "status": "ok" if line else f"failed (rc {p.returncode})",
                **(json.loads(line[7:]) if line else {"tail": text[-1500:]}),
            }
        except subprocess.TimeoutExpired as e:
            text = str(e.stdout or "") + str(e.stderr or "")
            results[rid] = {"status": "timed out"}
        results[rid]["seconds"] = round(time.monotonic() - t0, 1)
        log.write(f"=== {rid} {json.dumps(options)}\n{text}\n")
        log.flush()
        print(rid, json.dumps(results[rid])[:600], flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    with tarfile.open(out / "graphs.tar", "w") as tar:
        tar.add(dest, arcname="graphs")


if __name__ == "__main__":
    main(Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:])
