"""The HTML report's figures as inline SVG: drawing only.

Each function takes a part of the page's document wrapped in `Node` (report/markup.py), so that every
number it writes is a value of the document, marked with its place there (`data-key`, a JSON pointer)
and its value (`data-value`); axis ticks are scale, not numbers of the document (`class="tick"`).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from headroom.report.colors import COLORS, color
from headroom.report.markup import Node, number

LABEL_W = 300  # the names' column
BAR_W = 420  # the bars' full length
ROW_H = 22
BAR_H = 14
END_W = 200  # the labels after a bar


def _svg(body: list[str], height: int, figure: str, title: str) -> str:
    width = LABEL_W + BAR_W + END_W
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="figure" data-figure="{figure}" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}"><title>{escape(title)}</title>'
        + "".join(body)
        + "</svg>"
    )


def _name(y: float, text: str, path: bool = False) -> str:
    """A row's name; a long one cut (a path keeps its end, where traces differ)."""
    short = text if len(text) <= 46 else ("…" + text[-44:] if path else text[:44] + "…")
    return (
        f'<text x="{LABEL_W - 8}" y="{y + BAR_H - 3:.1f}" text-anchor="end" class="name">'
        f"<title>{escape(text)}</title>{escape(short)}</text>"
    )


def _ticks(y0: float, y1: float, labels: Sequence[tuple[float, str]]) -> list[str]:
    out = []
    for frac, label in labels:
        x = LABEL_W + frac * BAR_W
        out.append(
            f'<line x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y1:.1f}" class="grid"/>'
            f'<text x="{x:.1f}" y="{y1 + 12:.1f}" text-anchor="middle" class="tick">{escape(label)}</text>'
        )
    return out


def _rect(x: float, y: float, w: float, fill: str, node: Node, fmt: str, label: str, cls: str = "") -> str:
    """A bar segment carrying its number (its tooltip says what it is)."""
    v = node.value
    text = number(v, fmt)
    return (
        f'<rect x="{x:.2f}" y="{y:.1f}" width="{max(w, 0.0):.2f}" height="{BAR_H}" fill="{fill}"'
        f'{f" class={chr(34)}{cls}{chr(34)}" if cls else ""} data-key="{node.key}" data-value="{node.raw}" '
        f'data-fmt="{fmt}"><title>{escape(label)}: {text}</title></rect>'
    )


def _tspan(node: Node, fmt: str) -> str:
    return f'<tspan data-key="{node.key}" data-value="{node.raw}" data-fmt="{fmt}">{number(node.value, fmt)}</tspan>'


def _legend(y: float, items: Sequence[tuple[str, str, bool]]) -> tuple[list[str], float]:
    """Swatches in rows across the figure: (label, colour, outlined)."""
    out, x, width = [], 10.0, LABEL_W + BAR_W + END_W
    for label, fill, outlined in items:
        w = 26 + 7.2 * len(label)
        if x + w > width - 10:
            x, y = 10.0, y + 16
        out.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="10" height="10" fill="{fill}" '
            f'stroke="{"#222222" if outlined else "#999999"}" stroke-width="{1.2 if outlined else 0.6}"/>'
            f'<text x="{x + 14:.1f}" y="{y + 9:.1f}" class="legend">{escape(label)}</text>'
        )
        x += w
    return out, y + 16


def category_chart(workloads: Node) -> str:
    """One stacked bar per workload: its categories' shares of kernel time, vendor-library categories
    (greys) first, addressable ones (colour, outlined) after them; the addressable sum after the bar."""
    body: list[str] = []
    seen: dict[str, tuple[str, bool]] = {}
    extra = 0
    y = 10.0
    for w in workloads:
        body.append(_name(y, str(w["workload"].value)))
        x = float(LABEL_W)
        for bar in w["bars"]:
            cat = str(bar["category"].value)
            if cat not in seen:
                seen[cat] = (color(cat, extra), bool(bar["addressable"].value))
                extra += cat not in COLORS
            fill, addressable = seen[cat]
            width = float(bar["fraction"].value or 0.0) * BAR_W
            body.append(_rect(x, y, width, fill, bar["fraction"], "pct", cat, "addressable" if addressable else ""))
            x += width
        body.append(
            f'<text x="{LABEL_W + BAR_W + 8}" y="{y + BAR_H - 3:.1f}" class="end">'
            f"{_tspan(w['addressable_fraction'], 'pct')} addressable</text>"
        )
        y += ROW_H
    body[:0] = _ticks(4.0, y, [(f, f"{int(100 * f)}%") for f in (0, 0.25, 0.5, 0.75, 1.0)])
    order = sorted(seen.items(), key=lambda kv: kv[1][1])  # vendor-library categories first, as they stack
    legend, height = _legend(y + 24, [(c + (" (addressable)" if a else ""), f, a) for c, (f, a) in order])
    return _svg(body + legend, int(height + 6), "categories", "Share of GPU kernel time by category")


def projection_chart(projections: Node) -> str:
    """Per trace: the measured step (grey) and the estimate with its interval (a whisker from low to
    high), per step, on the clock the estimate is on; each row as shares of its own measured step, on one
    scale that holds the longest (an estimate slower than the measured step reaches past its end)."""
    rows = [p for p in projections if p.value.get("estimate_per_step_us")]
    if not rows:
        return ""

    def share(e: Node, k: str) -> float:
        return float(e[k].value) / (float(e["baseline_us"].value) or 1.0)

    keys = ("projected_us", "low_us", "high_us")
    scale = max(
        [1.0] + [share(p["estimate_per_step_us"], k) for p in rows for k in keys if p["estimate_per_step_us"].has(k)]
    )
    body: list[str] = []
    y = 10.0
    for p in rows:
        e = p["estimate_per_step_us"]
        body.append(_name(y, str(p["trace"].value), path=True))
        body.append(_rect(LABEL_W, y, BAR_W / scale, "#d9d9d9", e["baseline_us"], "ms", "measured ms/step"))
        body.append(
            _rect(
                LABEL_W,
                y + 4,
                share(e, "projected_us") / scale * BAR_W,
                "#1f77b4",
                e["projected_us"],
                "ms",
                "estimate ms/step",
                "estimate",
            )
        )
        if e.has("low_us") and e.has("high_us"):
            lo, hi = (share(e, k) / scale * BAR_W + LABEL_W for k in ("low_us", "high_us"))
            mid = y + 4 + BAR_H / 2
            body.append(f'<line x1="{lo:.2f}" y1="{mid:.1f}" x2="{hi:.2f}" y2="{mid:.1f}" class="whisker"/>')
            for x, k, what in ((lo, "low_us", "low"), (hi, "high_us", "high")):
                body.append(
                    f'<line x1="{x:.2f}" y1="{mid - 4:.1f}" x2="{x:.2f}" y2="{mid + 4:.1f}" class="whisker" '
                    f'data-key="{e[k].key}" data-value="{e[k].raw}" data-fmt="ms">'
                    f"<title>{what}, ms/step: {number(e[k].value, 'ms')}</title></line>"
                )
        est = p["estimate"]
        body.append(
            f'<text x="{LABEL_W + BAR_W + 8}" y="{y + BAR_H - 3:.1f}" class="end">'
            f"{_tspan(est['speedup'], 'x')} ({_tspan(est['low'], 'x')} to {_tspan(est['high'], 'x')})</text>"
        )
        y += ROW_H + 4
    body[:0] = _ticks(4.0, y, [(f / scale, f"{int(100 * f)}%") for f in (0, 0.25, 0.5, 0.75, 1.0)])
    legend, height = _legend(
        y + 24, [("measured step", "#d9d9d9", False), ("estimate, interval low to high", "#1f77b4", False)]
    )
    return _svg(body + legend, int(height + 6), "projection", "Projected step time, as a share of the measured step")


RANK_PARTS = (
    ("compute_us_per_step", "compute", "#252525"),
    ("comm_exposed_us_per_step", "exposed communication", "#d62728"),
    ("idle_us_per_step", "idle", "#ffffff"),
)


def rank_chart(bars: Node) -> str:
    """Per rank: its step split into compute, exposed communication and idle (ms per step)."""
    rows = list(bars)
    if not rows:
        return ""
    top = max(sum(float(r[k].value or 0.0) for k, _, _ in RANK_PARTS) for r in rows) or 1.0
    body: list[str] = []
    y = 10.0
    for r in rows:
        body.append(_name(y, f"rank {r['rank'].value}"))
        x = float(LABEL_W)
        for key, label, fill in RANK_PARTS:
            width = float(r[key].value or 0.0) / top * BAR_W
            body.append(
                _rect(x, y, width, fill, r[key], "ms", f"{label} ms/step", "idle" if key.startswith("idle") else "")
            )
            x += width
        body.append(
            f'<text x="{LABEL_W + BAR_W + 8}" y="{y + BAR_H - 3:.1f}" class="end">'
            f"{_tspan(r['step_us'], 'ms')} ms/step</text>"
        )
        y += ROW_H
    body[:0] = _ticks(4.0, y, [(f, f"{f * top / 1000:.2f} ms") for f in (0, 0.25, 0.5, 0.75, 1.0)])
    legend, height = _legend(y + 24, [(label, fill, True) for _, label, fill in RANK_PARTS])
    return _svg(body + legend, int(height + 6), "ranks", "Each rank's step: compute, exposed communication, idle")


WATERFALL_COLORS = {"start": "#7f7f7f", "end": "#7f7f7f", "saved": "#2ca02c", "added": "#d62728"}


def _label(y: float, node: Node, width: int = 40) -> str:
    """A row's name that is a value of the document: marked, whole in its tooltip, shortened on screen by
    its structure (a kernel's template arguments first)."""
    from headroom.report.render import short_name

    whole = str(node.value)
    short = short_name(whole, width)
    return (
        f'<text x="{LABEL_W - 8}" y="{y + BAR_H - 3:.1f}" text-anchor="end" class="name" data-key="{node.key}">'
        f"<title>{escape(whole)}</title>{escape(short)}</text>"
    )


def waterfall_chart(rows: Node) -> str:
    """From the step before to the step after (the `Diff.waterfall()` bars, in µs): each delta runs from
    the level the bars before it reached, savings in green, losses in red; the axis spans the levels the
    deltas move between, so the whole steps (grey) run in from its left edge."""
    bars = list(rows)
    if not bars:
        return ""
    starts = [float(r["start_us"].value) for r in bars]
    ends = [s + float(r["delta_us"].value) for s, r in zip(starts, bars)]
    levels = [s for s, r in zip(starts, bars) if r["kind"].value == "delta"] + ends
    lo, hi = min(levels), max(levels)
    pad = max(0.15 * (hi - lo), 0.01 * hi)
    a0, a1 = max(0.0, lo - pad), hi + pad
    span = (a1 - a0) or 1.0

    def x(v: float) -> float:
        return LABEL_W + (max(v, a0) - a0) / span * BAR_W

    body: list[str] = []
    y = 10.0
    for k, (r, start, end) in enumerate(zip(bars, starts, ends)):
        kind = str(r["kind"].value)
        delta = kind == "delta"
        fill = WATERFALL_COLORS["saved" if end < start else "added"] if delta else WATERFALL_COLORS[kind]
        left, right = (x(min(start, end)), x(max(start, end))) if delta else (float(LABEL_W), x(end))
        body.append(_label(y, r["label"]))
        body.append(
            _rect(left, y, right - left, fill, r["delta_us"], "dms" if delta else "ms3", str(r["label"].value), kind)
        )
        if k + 1 < len(bars):  # the level the next bar starts from
            body.append(
                f'<line x1="{x(end):.2f}" y1="{y + BAR_H:.1f}" x2="{x(end):.2f}" y2="{y + ROW_H:.1f}" class="level"/>'
            )
        body.append(
            f'<text x="{LABEL_W + BAR_W + 8}" y="{y + BAR_H - 3:.1f}" class="end">'
            f"{_tspan(r['delta_us'], 'dms' if delta else 'ms3')} ms</text>"
        )
        y += ROW_H
    body[:0] = _ticks(4.0, y, [(f, f"{(a0 + f * span) / 1000:.3f} ms") for f in (0, 0.25, 0.5, 0.75, 1.0)])
    legend, height = _legend(
        y + 24,
        [
            ("step", WATERFALL_COLORS["start"], False),
            ("saved", WATERFALL_COLORS["saved"], False),
            ("added", WATERFALL_COLORS["added"], False),
        ],
    )
    return _svg(body + legend, int(height + 6), "waterfall", "Where the step time changed (profiled clock, per step)")
