"""Load and classify every committed trace; print what the loader found and how long it took.

Run on two machines and compare: the numbers (GPU time, addressable share,
kernel count) must be identical; the seconds show the loader on that CPU.

    python lab/probes/loader_check.py [--out results.json]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import time
from pathlib import Path

from headroom.trace.analysis import analyze

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    for path in sorted(REPO.glob("traces/**/*.json.gz")):
        t0 = time.perf_counter()
        a = analyze(path)
        rows.append(
            {
                "trace": str(path.relative_to(REPO)),
                "seconds": round(time.perf_counter() - t0, 3),
                "gpu_activities": len(a.events),
                "total_us": round(a.total_us, 3),
                "addressable_fraction": round(a.addressable_fraction, 6),
                "kernels": len(a.kernels),
            }
        )
        print(
            f"{rows[-1]['trace']:<70} {rows[-1]['seconds']:6.3f} s  {a.total_us:14.3f} us  "
            f"{a.addressable_fraction:7.2%}"
        )
    result = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "python": platform.python_version(),
        "versions": {m: importlib.metadata.version(m) for m in ("polars", "msgspec", "pandas", "numpy")},
        "traces": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
