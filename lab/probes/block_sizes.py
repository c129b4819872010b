"""Why the loader reads 4 MB blocks: decode time and minor page faults per block size, in one process.

    python lab/probes/block_sizes.py TRACE [--sizes 32,8,4,2] [--rounds 2] [--out block_sizes.json]

For each block size (MB) the trace is cut (document.split) and every chunk decoded
(kineto.decode_events), each chunk's result dropped before the next as the loader
does, in a fresh subprocess; the sizes are interleaved round by round. Recorded
per run: wall time of reading + cutting + decoding, of decoding alone, and the
process' minor page faults (getrusage ru_minflt) over the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import gc, json, resource, sys, time
from pathlib import Path
from headroom.trace import document, kineto
gc.disable()
block = int(sys.argv[2]) << 20
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t0, f0, decode, chunks = time.perf_counter(), faults(), 0.0, 0
for item in document.split(Path(sys.argv[1]), block):
    if isinstance(item, document.Document):
        break
    t = time.perf_counter()
    result = kineto.decode_events(item[0])
    decode += time.perf_counter() - t
    chunks += 1
    del result
print(json.dumps({"chunks": chunks, "total_s": time.perf_counter() - t0, "decode_s": decode,
                  "minor_faults": faults() - f0}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--sizes", default="32,8,4,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = []
    for r in range(args.rounds):
        for mb in [int(x) for x in args.sizes.split(",")]:
            p = subprocess.run(
                [sys.executable, "-c", CHILD, str(args.trace), str(mb)],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            run = {
                "round": r + 1,
                "block_mb": mb,
                "load_avg_1m": os.getloadavg()[0],
                **json.loads(p.stdout.strip().splitlines()[-1]),
            }
            runs.append(run)
            print(
                f"round {r + 1} {mb:3d} MB: {run['chunks']:4d} chunks, total {run['total_s']:.2f} s, "
                f"decode {run['decode_s']:.2f} s, {run['minor_faults']:,} minor faults"
            )
    out = {
        "trace": str(args.trace),
        "bytes": args.trace.stat().st_size,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "command": "lab/probes/block_sizes.py " + " ".join(sys.argv[1:]),
        "runs": runs,
    }
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
