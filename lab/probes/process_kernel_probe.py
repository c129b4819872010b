"""Does one KernelBench problem's kernel time depend on the process it runs in?

An identical candidate of level-1 68_conv_transposed_3D measured 0.947x on the gated clock, and the two
verify children's own profiles agreed (33.5 vs 35.4 ms per forward); the next call measured 0.999x. This
runs the problem's reference in several fresh processes, one after another, each timing forwards with
CUDA events and naming the kernels the profiler saw, so a per-process difference (and its kernels) shows.

    python3 lab/probes/process_kernel_probe.py --problem .kb/level1/68_*.py --processes 6 --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import importlib.util, json, sys, torch
spec = importlib.util.spec_from_file_location("problem", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
torch.manual_seed(0)
model = m.Model(*m.get_init_inputs()).cuda()
xs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in m.get_inputs()]
with torch.no_grad():
    for _ in range(3):
        model(*xs)
    torch.cuda.synchronize()
    ms = []
    for _ in range(int(sys.argv[2])):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); model(*xs); b.record(); b.synchronize(); ms.append(a.elapsed_time(b))
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        model(*xs); torch.cuda.synchronize()
kernels = sorted({e.name for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA})
free, total = torch.cuda.mem_get_info()
print(json.dumps({"ms": ms, "kernels": kernels, "free_gb": free / 2**30}))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", required=True, nargs="+")
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    doc: dict = {
        "tool": "process_kernel_probe",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv),
        "problems": {},
    }
    for prob in a.problem:
        runs = []
        for _ in range(a.processes):
            p = subprocess.run(
                [sys.executable, "-c", CHILD, prob, str(a.iters)], capture_output=True, text=True, timeout=120
            )
            if p.returncode != 0:
                runs.append({"error": p.stderr[-500:]})
                continue
            r = json.loads(p.stdout.strip().splitlines()[-1])
            r["median_ms"] = sorted(r["ms"])[len(r["ms"]) // 2]
            runs.append(r)
            print(Path(prob).name, f"{r['median_ms']:.3f} ms", r["kernels"], flush=True)
        doc["problems"][Path(prob).name] = runs
        Path(a.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
