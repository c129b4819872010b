"""The validation table (docs/validation.md) from a list of `headroom validate --json` objects.

    python -m headroom.report.validation docs/gpu/validation.json > table.md

Numbers only come from the objects; this module formats them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HEADER = (
    "| substitution | regime | measured (interval, coverage) | part: speedup, µs/step, launches/call | "
    "Amdahl (error) | replay (error) | from the variant [bounds] (error) | "
    "a-priori estimate [90% interval] (error) |"
)
RULE = "|---|---|---:|---:|---:|---:|---:|---:|"


def _x(v: Any, digits: int = 3) -> str:
    return f"{v:.{digits}f}x" if isinstance(v, (int, float)) else "–"


def _err(v: Any) -> str:
    return f"{100 * v:+.1f}%" if isinstance(v, (int, float)) else "–"


def _config(r: dict) -> str:
    c = r.get("config") or {}
    bits = [c.get("phase") or c.get("mode") or ""]
    if c.get("kv_cache") and c.get("phase") == "decode":
        bits.append(f"{c['kv_cache']} cache")
    size = f"bs{c.get('batch')}" + (f"×{c['seq']}" if c.get("seq") else "")
    bits.append(size)
    if c.get("dtype"):
        bits.append({"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(c["dtype"], c["dtype"]))
    if c.get("graphs"):  # the execution mode: a row under CUDA graphs reads apart from its eager twin
        bits.append("CUDA graphs")
    elif c.get("compile_mode") or c.get("compile"):
        bits.append(f"compiled ({c.get('compile_mode') or 'default'})")
    return ", ".join(b for b in bits if b)


def row(r: dict) -> str:
    reps = "; ".join(f"{x['module']} ×{x['instances']} → `{Path(x['candidate']).name}`" for x in r["replacements"])
    b, m, p, pr, e = r["baseline"], r["measured"], r["part"], r["projected"], r["error"]
    if (r.get("detail") or {}).get("trace_mode") == "cpu-ops":
        regime = "CPU only (no GPU)"
    else:
        regime = f"GPU idle {100 * b['idle_fraction']:.0f}%" + (", launch-bound" if b.get("launch_bound") else "")
    lp = p.get("launches_per_call") or [None, None]
    launches = (
        f"{lp[0]:.3g} → {lp[1]:.3g}" if isinstance(lp[0], (int, float)) and isinstance(lp[1], (int, float)) else "–"
    )
    part = f"{_x(p.get('speedup'), 2)}, {p['base_us']:.0f} → {p['variant_us']:.0f}, {launches}"
    env = (r.get("detail") or {}).get("variant_envelope") or [None, None]
    var = _x(pr.get("variant_estimate"))
    if env[0] is not None and env[1] is not None:
        var += f" [{_x(env[0])}, {_x(env[1])}]"
    est = "– (no conclusive verify result)"
    if pr.get("estimate") is not None:
        inside = pr["low"] <= m["speedup"] <= pr["high"]
        est = (
            f"{_x(pr['estimate'])} [{_x(pr['low'])}, {_x(pr['high'])}]{'' if inside else ' (outside)'} "
            f"({_err(e.get('estimate'))})"
        )
    cov = f", {100 * m['coverage']:.1f}%" if m.get("coverage") else ""
    return (
        f"| {r['workload']} ({_config(r)}): {reps} | {regime} | "
        f"{_x(m['speedup'])} ({_x(m['ci'][0])}–{_x(m['ci'][1])}{cov}) | {part} | "
        f"{_x(pr.get('amdahl'))} ({_err(e.get('amdahl'))}) | {_x(pr.get('replay'))} ({_err(e.get('replay'))}) | "
        f"{var} ({_err(e.get('variant_estimate'))}) | {est} |"
    )


def validation_table(results: list[dict]) -> str:
    return "\n".join([HEADER, RULE, *(row(r) for r in results)])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m headroom.report.validation VALIDATION.json", file=sys.stderr)
        return 2
    try:
        results = json.loads(Path(argv[0]).read_text())
    except (OSError, ValueError) as e:
        print(f"headroom: error: {argv[0]}: {e}", file=sys.stderr)
        return 2
    if not isinstance(results, list):
        print(f"headroom: error: {argv[0]}: expected a list of `headroom validate --json` objects", file=sys.stderr)
        return 2
    print(validation_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
