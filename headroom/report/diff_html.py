"""`headroom diff BEFORE AFTER --html FILE`: the diff as one self-contained page (the report page's styles,
policy and sorting script: report/html.py), drawn from the `diff --html --json` document alone.

The document is the `headroom diff --json` one with `html` (the path written) and `page`: `waterfall`, the
bars of `Diff.waterfall()` with their times in µs (`start_us`, `delta_us`), the only numbers the page
shows that the diff document does not already hold. Every number on the page is marked with its place in
the document (report/markup.py), as on the report page.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from headroom.files import write_atomic
from headroom.jsonio import dumps, plain
from headroom.report.diff import Diff
from headroom.report.html import frame
from headroom.report.markup import Column, Node, notes, num, table, text
from headroom.report.svg import waterfall_chart

DIFF_SCHEMA = "headroom.diff/1"
STEP_COLUMNS = [
    Column("clock", "clock"),
    Column("before_us", "before ms/step", "ms3"),
    Column("after_us", "after ms/step", "ms3"),
    Column("change", "change", "dpct"),
    Column("speedup", "speedup", "x"),
]
ROW_COLUMNS = [
    Column("name", "name", width=60),
    Column("category", "category"),
    Column("status", "status"),
    Column("before_us", "before ms/step", "ms3"),
    Column("after_us", "after ms/step", "ms3"),
    Column("delta_us", "delta ms", "dms"),
    Column("share", "share of change", "pct"),
    Column("before_kernels", "kernels/step before", "num"),
    Column("after_kernels", "kernels/step after", "num"),
    Column("delta_wall_us", "busy delta ms", "dms"),
]
ONE_SIDE_COLUMNS = [
    Column("name", "name", width=60),
    Column("category", "category"),
    Column("before_us", "before ms/step", "ms3"),
    Column("after_us", "after ms/step", "ms3"),
    Column("delta_us", "delta ms", "dms"),
]


def diff_page_numbers(d: Diff) -> dict[str, Any]:
    """What the page shows beyond the diff document: the waterfall's bars, in µs."""
    w = d.waterfall()
    return {
        "waterfall": [
            {
                "label": str(r.label),
                "kind": str(r.kind),
                "start_us": float(r.start_ms) * 1e3,
                "delta_us": float(r.delta_ms) * 1e3,
            }
            for r in w.itertuples(index=False)
        ]
    }


def step_section(doc: Node) -> str:
    steps = [doc[k] for k in ("profiled", "unprofiled") if doc[k].value]
    k, i = doc["kernel_us"], doc["idle_us"]
    work = "GPU kernel time" if doc["mode"].value == "gpu" else "CPU op self time"
    totals = (
        f"<p>{work} per step: {num(k['before_us'], 'ms3')} ms to {num(k['after_us'], 'ms3')} ms "
        f"({num(k['delta_us'], 'dms')} ms)"
        + (
            f"; idle per step: {num(i['before_us'], 'ms3')} ms to {num(i['after_us'], 'ms3')} ms "
            f"({num(i['delta_us'], 'dms')} ms)"
            if i.value
            else ""
        )
        + ".</p>"
    )
    gate = doc["gate"]
    verdict = ""
    if gate.value:
        verdict = (
            f'<p class="estimate">--fail-if-slower {num(gate["fail_if_slower_pct"], "num")} percent: '
            f"{'slower than that' if gate['slower'].value else 'within it'}.</p>"
        )
    return (
        f"<p>Before: {text(doc['labels'][0])}, {num(doc['num_steps'][0], 'int')} steps; after: "
        f"{text(doc['labels'][1])}, {num(doc['num_steps'][1], 'int')} steps. The {text(doc['step']['clock'])} "
        f"clock leads (the gate's): speedup {num(doc['step']['speedup'], 'x', cls='lead')}, "
        f"change {num(doc['step']['change'], 'dpct')}.</p>"
        + table(steps, STEP_COLUMNS, "steps")
        + totals
        + verdict
        + notes(doc["notes"])
    )


def rows_section(doc: Node) -> str:
    rows = doc["rows"]
    if not len(rows):
        return ""
    return (
        f"<p>One row per {text(doc['by'])}, largest change first: time per step before and after, the delta "
        "and its share of the change of all kernel time (the shares sum to one), kernels per step, and the "
        "busy-time delta the waterfall draws.</p>" + table(rows, ROW_COLUMNS, "diff-rows")
    )


def one_side_section(doc: Node) -> str:
    parts = []
    for status, caption in (
        ("added", "in the after run only"),
        ("removed", "in the before run only"),
        ("replaced", "a module class swapped for another at the same instance paths"),
    ):
        rows = [r for r in doc["rows"] if r["status"].value == status]
        if rows:
            parts.append(table(rows, ONE_SIDE_COLUMNS, f"rows-{status}", f"{status}: {caption}"))
    return "".join(parts)


def waterfall_section(doc: Node) -> str:
    chart = waterfall_chart(doc["page"]["waterfall"])
    if not chart:
        return ""
    return (
        "<p>From the profiled step before to the step after: each row's busy-time delta, then the idle delta "
        "where each side is one trace; rows of under half a percent of the step are summed as one bar.</p>" + chart
    )


# The page, section by section: (id, heading, the function that draws it from the document).
DIFF_SECTIONS: list[tuple[str, str, Callable[[Node], str]]] = [
    ("step", "Step time", step_section),
    ("waterfall", "Where the step changed", waterfall_section),
    ("rows", "What changed", rows_section),
    ("added", "Added and removed", one_side_section),
]
FOOTER = "times in ms per step; click a column's heading to sort the table by it."


def render_diff_page(doc: dict[str, Any]) -> str:
    """The page of a `diff --html --json` document."""
    root = Node(doc)
    return frame(
        "headroom diff",
        [root["before"], root["after"]],
        [(sid, heading, fn(root)) for sid, heading, fn in DIFF_SECTIONS],
        FOOTER,
    )


def html_diff(d: Diff, out: str | os.PathLike, gate: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the page of `d` to `out` (atomically) and return its document: the `diff --json` document
    (`gate`: its verdict, None without --fail-if-slower) with `html` and `page`."""
    body = {"schema": DIFF_SCHEMA, **plain(d), "gate": gate, "html": str(out), "page": diff_page_numbers(d)}
    doc = json.loads(dumps(body))  # as --json prints it: NaN and infinities are null
    write_atomic(out, render_diff_page(doc))
    return doc
