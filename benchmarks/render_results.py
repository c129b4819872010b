"""Markdown tables from bench_loader.py's results JSON (what docs/benchmarks.md shows).

python benchmarks/render_results.py benchmarks/results/loader_vs_hta_three_shapes.json [more results ...]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def render(result: dict) -> str:
    lines = [
        f"{result['machine']}; Python {result['python']}; "
        + ", ".join(f"{k} {v}" for k, v in result["versions"].items())
        + f"; {result['date']}.",
        f"Command: `{result['command']}`.",
        "",
    ]
    for shape, r in result["shapes"].items():
        t = r["trace"]
        what = f"{t['mb']:.0f} MB" + (
            f", {t['events']:,} events, {t['copies']} copies of `{t['source']}`"
            if t.get("events")
            else f", `{t['source']}`"
        )
        at_once = any("peak_rss_at_once_mb" in x for x in r["readers"])
        lines += [
            f"**{shape}** ({what})",
            "",
            "| reader | runs (s) | load avg (1 min) per run | median | CPU s (median) | peak RSS |"
            + (" peak RSS at once |" if at_once else ""),
            "|---|---|---|---:|---:|---:|" + ("---:|" if at_once else ""),
        ]
        readers = list(dict.fromkeys(x["reader"] for x in r["readers"]))
        for name in readers:
            runs = [x for x in r["readers"] if x["reader"] == name and "error" not in x]
            if not runs:
                lines.append(f"| {name} | error | | | | |")
                continue
            rss = max((x["peak_rss_mb"] for x in runs if x.get("peak_rss_mb")), default=None)
            secs = ", ".join(f"{x['seconds']:.2f}" for x in runs)
            loads = ", ".join(f"{x['load_avg_1m']:.1f}" for x in runs)
            lines.append(
                f"| {name} | {secs} | {loads} | "
                f"{statistics.median(x['seconds'] for x in runs):.2f} s | "
                + (
                    f"{statistics.median(x['cpu_s'] for x in runs):.2f} | "
                    if all("cpu_s" in x for x in runs)
                    else "- | "
                )
                + (f"{rss:,.0f} MB |" if rss else "- |")
                + (_at_once(runs) if at_once else "")
            )
        s = r["summary"]
        per_round = _per_round(r["readers"])
        if per_round:
            lines += [
                "",
                "Per round (readers run side by side): HTA / headroom = "
                + ", ".join(f"{x:.1f}x" for x in per_round["hta"])
                + f" (median **{statistics.median(per_round['hta']):.1f}x**)"
                + (
                    "; json.load / headroom = " + ", ".join(f"{x:.2f}x" for x in per_round["json.load"])
                    if per_round.get("json.load")
                    else ""
                )
                + ".",
            ]
        ratios = []
        if "speedup_vs_hta" in s:
            ratios.append(
                f"vs HTA **{s['speedup_vs_hta']:.1f}x** faster at **{s['rss_ratio_vs_hta']:.2f}x** its peak RSS"
            )
        if "speedup_vs_json_load" in s:
            ratios.append(f"vs `json.load` {s['speedup_vs_json_load']:.2f}x")
        if ratios:
            lines += ["", "headroom (default): " + "; ".join(ratios) + "."]
        lines.append("")
    return "\n".join(lines)


def _per_round(rows: list[dict]) -> dict[str, list[float]]:
    """Each other reader's time over headroom's, in each round where both ran."""
    by_round: dict[int, dict[str, float]] = {}
    for x in rows:
        if "error" not in x and "run" in x:
            by_round.setdefault(x["run"], {})[x["reader"]] = x["seconds"]
    out: dict[str, list[float]] = {}
    for other in ("hta", "json.load"):
        vals = [rd[other] / rd["headroom"] for _, rd in sorted(by_round.items()) if other in rd and "headroom" in rd]
        if vals:
            out[other] = vals
    return out if "hta" in out else {}


def _at_once(runs: list[dict]) -> str:
    """The largest total of the reader and its worker sampled at one moment (bench_loader.py, every 20 ms)."""
    values = [x["peak_rss_at_once_mb"] for x in runs if x.get("peak_rss_at_once_mb")]
    return f" {max(values):,.0f} MB |" if values else " - |"


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(render(json.loads(Path(p).read_text())))
