"""The `--layers` accuracy check, recomputed from the committed H200 traces.

Compares the category fractions of a full 32-layer llama-7b trace with those
extrapolated from a 4-layer trace of the same run configuration
(`headroom profile llama-7b --layers 4`), for prefill and decode. Both traces of a
pair are from one capture (traces/checks/, 2026-11-29, without module ranges): with
module ranges the kernels inside an RMSNorm module count as normalization, so a
module-ranged full trace is compared only with a module-ranged 4-layer one.

    python lab/probes/layers_check.py [--json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from headroom.trace.analysis import analyze  # noqa: E402
from headroom.trace.layers import extrapolate_layers  # noqa: E402

PAIRS = {
    "prefill": (
        "traces/checks/llama-7b.infer.prefill.json.gz",
        "traces/checks/llama-7b.infer.prefill.4of32-layers.json.gz",
    ),
    "decode": (
        "traces/checks/llama-7b.infer.decode.static-cache.json.gz",
        "traces/checks/llama-7b.infer.decode.static-cache.4of32-layers.json.gz",
    ),
}


def check(full_path: Path, part_path: Path, built: int = 4, total: int = 32) -> dict:
    full = analyze(full_path)
    part = analyze(part_path)
    ext = extrapolate_layers(part, built, total)
    measured = full.categories.set_index("name")["fraction"]
    extrapolated = ext.categories.set_index("name")["fraction"]
    names = sorted(set(measured.index) | set(extrapolated.index), key=lambda n: -measured.get(n, 0.0))
    rows = {
        n: {
            "full_pct": 100 * float(measured.get(n, 0.0)),
            "extrapolated_pct": 100 * float(extrapolated.get(n, 0.0)),
            "diff_pp": 100 * float(extrapolated.get(n, 0.0) - measured.get(n, 0.0)),
        }
        for n in names
    }
    return {
        "full_trace": str(full_path.relative_to(REPO)),
        "layers_trace": str(part_path.relative_to(REPO)),
        "max_abs_diff_pp": max(abs(r["diff_pp"]) for r in rows.values()),
        "addressable_full_pct": 100 * full.addressable_fraction,
        "addressable_extrapolated_pct": 100 * ext.addressable_fraction,
        "trace_step_ms_full": full.step_us / 1000,
        "trace_step_ms_extrapolated": ext.step_us_extrapolated / 1000,
        "categories": rows,
    }


def main() -> None:
    results = {phase: check(REPO / a, REPO / b) for phase, (a, b) in PAIRS.items()}
    if "--json" in sys.argv:
        print(json.dumps(results, indent=2))
        return
    for phase, r in results.items():
        print(
            f"{phase}: max |diff| {r['max_abs_diff_pp']:.2f} pp; addressable {r['addressable_full_pct']:.1f}% "
            f"(32 layers) vs {r['addressable_extrapolated_pct']:.1f}% (4 -> 32); trace step "
            f"{r['trace_step_ms_full']:.1f} ms vs {r['trace_step_ms_extrapolated']:.1f} ms extrapolated"
        )
        for n, c in r["categories"].items():
            print(f"  {n:<14} {c['full_pct']:6.2f}%  {c['extrapolated_pct']:6.2f}%  {c['diff_pp']:+6.2f} pp")


if __name__ == "__main__":
    main()
