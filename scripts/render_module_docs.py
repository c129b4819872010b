"""Write docs/modules.md's result tables from what lab/gpu/gpu_capture.py brought back.

    python scripts/render_module_docs.py OUT/targets.json OUT/module_ranges.json [--doc docs/modules.md] [--top 8]

Replaces the text between `<!-- module-targets:begin -->` / `<!-- module-targets:end -->` (a table of
the top module classes of every trace, self time) and `<!-- module-overhead:begin -->` /
`<!-- module-overhead:end -->` (the cost of the ranges), and leaves the rest of the file alone.
Without `--doc` it prints the two tables.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKERS = {"targets": "module-targets", "overhead": "module-overhead"}


def _pct(x: float | None, digits: int = 1) -> str:
    return "" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}%"


def _num(x: float | None, fmt: str) -> str:
    return "" if x is None or not math.isfinite(x) else format(x, fmt)


def targets_table(targets: dict, top: int = 8) -> str:
    """One section per trace: its top module classes by gain at the ranked speedup (self time)."""
    out = []
    for trace in sorted(targets):
        table = targets[trace].get("module:self") or {}
        rows = table.get("targets") or []
        out.append(
            f"**{trace}** — {table.get('per_step_us', 0) / 1e3:,.2f} ms/step"
            f" over {table.get('num_steps', 0)} step(s), `{table.get('command', '')}`\n"
        )
        if not rows:
            notes = table.get("notes") or ["no module rows"]
            out.append(f"_{notes[0]}_\n")
            continue
        s = table.get("speedup", 1.5)
        out.append(
            f"| module | calls/step | kernels/call | CPU µs/call | ms/step | share | categories | "
            f"gain @{s:g}x | gain @∞ | replay @{s:g}x | replay @∞ | inputs (most calls) |"
        )
        out.append("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")
        steps = max(int(table.get("num_steps") or 1), 1)
        for r in rows[:top]:
            cats = ", ".join(
                f"{c} {100 * f:.0f}%" for c, f in sorted((r.get("categories") or {}).items(), key=lambda kv: -kv[1])[:2]
            )
            phases = r.get("phases") or {}
            if phases.get("backward"):
                cats += f"; bwd {100 * phases['backward']:.0f}%"
            seen = r.get("inputs") or []
            inputs = f"`{seen[0]['inputs']}`" + (f" (+{len(seen) - 1})" if len(seen) > 1 else "") if seen else ""
            out.append(
                f"| {r['name']} | {_num(r.get('calls'), ',.4g')} | {_num(r.get('kernels_per_call'), ',.1f')} | "
                f"{_num(r.get('cpu_us_per_call'), ',.1f')} | {r['us'] / 1e3 / steps:,.2f} | "
                f"{_pct(r.get('share'))} | {cats} | {_pct(r.get('gain'), 2)} | {_pct(r.get('gain_inf'), 2)} | "
                f"{_pct(r.get('replay_gain'), 2)} | {_pct(r.get('replay_gain_inf'), 2)} | {inputs} |"
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def overhead_table(bench: dict) -> str:
    m = bench.get("machine", {})
    lines = [
        f"Machine: {m.get('gpu') or m.get('device', '?')}, torch {m.get('torch', '?')}, {bench.get('date', '?')}; "
        f"`{bench.get('command', '')}`.\n",
        "| case | modules | calls/step | steps/measurement | step ms (no ranges) | overhead | 95% CI | "
        "profiled step ms (no ranges) | overhead under the profiler | 95% CI | < 1% on a GPU-bound step |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---|---|",
    ]
    for c in bench.get("cases", []):
        if "error" in c or "skipped" in c:
            lines.append(f"| {c['name']} | {c.get('error') or c.get('skipped')} |||||||||| |")
            continue
        p, q = c["plain"], c["profiled"]
        verdict = ("yes" if p["overhead"] < 0.01 else "**no**") if c["gpu_bound"] else "n/a (launch-bound)"
        lines.append(
            f"| {c['name']} | {c['modules_with_ranges']} | {c['module_calls_per_step']} | {c['steps_per_measurement']} | "
            f"{p['off_median_ms']:,.3f} | {_pct(p['overhead'], 2)} | [{_pct(p['ci95'][0], 2)}, {_pct(p['ci95'][1], 2)}] | "
            f"{q['off_median_ms']:,.3f} | {_pct(q['overhead'], 2)} | [{_pct(q['ci95'][0], 2)}, {_pct(q['ci95'][1], 2)}] | "
            f"{verdict} |"
        )
    return "\n".join(lines) + "\n"


def replace_section(text: str, marker: str, body: str) -> str:
    rx = re.compile(rf"(<!-- {marker}:begin -->\n).*?(<!-- {marker}:end -->)", re.DOTALL)
    if not rx.search(text):
        raise ValueError(f"no <!-- {marker}:begin/end --> markers")
    return rx.sub(lambda m: m.group(1) + body + m.group(2), text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", type=Path)
    ap.add_argument("overhead", type=Path)
    ap.add_argument("--doc", type=Path, default=None)
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args(argv)
    try:
        targets = json.loads(args.targets.read_text())
        bench = json.loads(args.overhead.read_text())
    except (OSError, ValueError) as e:
        print(f"render_module_docs: error: {e}", file=sys.stderr)
        return 2
    t, o = targets_table(targets, args.top), overhead_table(bench)
    if args.doc is None:
        print(t)
        print(o)
        return 0
    try:
        text = replace_section(replace_section(args.doc.read_text(), MARKERS["targets"], t), MARKERS["overhead"], o)
    except (OSError, ValueError) as e:
        print(f"render_module_docs: error: {args.doc}: {e}", file=sys.stderr)
        return 2
    tmp = args.doc.with_name(f".{args.doc.name}.tmp")
    tmp.write_text(text)
    tmp.replace(args.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
