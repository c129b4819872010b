"""`headroom report --html FILE`: one self-contained page (styles, script and figures inline, nothing
fetched when it is viewed), drawn from the `report --html --json` document alone (report/page.py makes
it), so every number on the page is one of the document's (report/markup.py marks each).

The page is a list of sections (`SECTIONS`): each takes the document and returns its markup, or ""
when the document has nothing for it; a section for a new part of the document is one more entry, and
a new column of a table one more `Column` (optional columns appear when the rows have the key).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from headroom._version import __version__
from headroom.files import write_atomic
from headroom.report.markup import Column, Node, notes, num, table, text
from headroom.report.svg import category_chart, projection_chart, rank_chart

SUMMARY_COLUMNS = [
    Column("workload", "workload"),
    Column("device", "device"),
    Column("mode", "mode"),
    Column("num_steps", "steps", "int"),
    Column("step_us", "step ms (profiled)", "ms"),
    Column("unprofiled_step_us", "step ms (unprofiled)", "ms"),
    Column("idle_fraction", "idle (profiled)", "pct"),
    Column("unprofiled_idle_fraction", "idle (unprofiled)", "pct"),
    Column("gpu_us_per_step", "GPU ms/step", "ms"),
    Column("gemm_attention_conv_fraction", "GEMM+attn+conv", "pct"),
    Column("addressable_fraction", "addressable", "pct"),
    Column("top_addressable_op", "top addressable op", width=48),
    Column("top_addressable_op_fraction", "its share", "pct"),
]
TARGET_COLUMNS = [
    Column("kind", "by"),
    Column("name", "name", width=60),
    Column("category", "category"),
    Column("addressable", "addressable"),
    Column("kernels", "kernels", "int"),
    Column("us", "kernel ms (all steps)", "ms"),
    Column("share", "share", "pct"),
    Column("gain", "gain", "pct"),
    Column("gain_inf", "gain at zero time", "pct"),
    Column("replay_gain", "replay gain", "pct", optional=True),
    Column("replay_gain_inf", "replay gain at zero time", "pct", optional=True),
    # With --roofline: the row's bound against the device's peaks (`targets --roofline`).
    Column("max_speedup", "max speedup", "x", optional=True),
    Column("fused_max_speedup", "fused max speedup", "x", optional=True),
    Column("limit", "limit", optional=True),
    Column("compute_fraction", "of compute peak", "pct", optional=True),
    Column("memory_fraction", "of memory bandwidth", "pct", optional=True),
    Column("achievable_gain", "achievable gain", "pct", optional=True),
]
RANK_TARGET_COLUMNS = [
    Column("kind", "by"),
    Column("name", "name", width=60),
    Column("category", "category"),
    Column("us", "kernel ms (all ranks, steps)", "ms"),
    Column("min_rank_us", "min rank ms", "ms"),
    Column("max_rank_us", "max rank ms", "ms"),
    Column("gain", "gain (synchronised)", "pct"),
    Column("gain_inf", "at zero time", "pct"),
    Column("rank_gain_median", "one-rank gain (median)", "pct"),
]
PROJECTION_COLUMNS = [
    Column("method", "method"),
    Column("scenario", "scenario"),
    Column("per_step_us", "ms/step (profiled clock)", "ms"),
    Column("speedup", "speedup", "x"),
    Column("gain", "gain", "pct"),
]
ENTRY_COLUMNS = [
    Column("selector", "selector", width=60),
    Column("speedup", "factor", "factor"),
    Column("source", "from", width=40),
    Column("applied_kernels", "kernels", "int"),
    Column("applied_us", "kernel ms (all steps)", "ms"),
]
RANK_COLUMNS = [
    Column("rank", "rank", "int"),
    Column("step_us", "step ms", "ms"),
    Column("idle_fraction", "idle", "pct"),
    Column("comm_fraction", "comm", "pct"),
    Column("comm_exposed_fraction", "exposed", "pct"),
    Column("wait_us", "waited ms (all steps)", "ms"),
    Column("addressable_fraction", "addressable", "pct"),
    Column("top_addressable_op", "top addressable op", width=48),
    Column("top_addressable_op_fraction", "its share", "pct"),
]
RANK_CATEGORY_COLUMNS = [
    Column("name", "category"),
    Column("addressable", "addressable"),
    Column("min_us", "min ms (all steps)", "ms"),
    Column("median_us", "median ms", "ms"),
    Column("max_us", "max ms", "ms"),
    Column("median_fraction", "median share", "pct"),
    Column("max_rank", "most on rank", "int"),
]
RANK_AMDAHL_COLUMNS = [
    Column("rank", "rank", "int"),
    Column("projected_us", "alone: ms (all steps)", "ms"),
    Column("gain", "alone: gain", "pct"),
]


def summary_section(doc: Node) -> str:
    parts = []
    if len(doc["traces"]):
        parts.append(table(doc["traces"], SUMMARY_COLUMNS, "summary-table"))
    if len(doc["failed"]):
        parts.append("<p>Could not be read:</p>" + notes(doc["failed"], "failed"))
    return "".join(parts)


def categories_section(doc: Node) -> str:
    w = doc["page"]["categories"]["workloads"]
    if not len(w):
        return ""
    return (
        "<p>Share of kernel time by category (of CPU operator self time in a trace without GPU activity); "
        "addressable categories (a new kernel could replace them) in colour, vendor-library ones in grey. "
        "A run of some of a model's blocks is shown as measured (the summary extrapolates it).</p>" + category_chart(w)
    )


def _roofline_note(device: Node, page: Node) -> str:
    if not device["peaks"].value:
        return ""
    return (
        f"<p>Roofline against {text(device['name'])} ({num(device['memory_tb_s'], 'num')} TB/s): max speedup is "
        "the row's kernel time over its floor (each costed op call at the longest of its FLOPs at the peak, its "
        "bytes at the memory bandwidth and the shortest kernel; kernels without a cost as measured), the fused "
        "one a module's with its inputs and output moved once; limit, the term holding most of the floor; the "
        "achieved rates as fractions of the compute peak and the memory bandwidth; achievable gain, the gain at "
        f"the smaller of the max speedup (a module's fused one) and {num(page['target_speedup'], 'factor')}.</p>"
    )


def targets_section(doc: Node) -> str:
    page = doc["page"]
    rows = f"The first {num(page['top'], 'int')} of each grouping." if page["top"].value else "Every row."
    parts = [
        f"<p>Which op or nn.Module, {num(page['target_speedup'], 'factor')} faster, shortens the step most "
        f"(gain: the share of the measured window saved; Amdahl). {rows}</p>"
    ]
    for k, t in enumerate(page["targets"]):
        ranks = t["kind"].value == "ranks"
        where = t["source"] if ranks else t["trace"]
        parts.append(
            f"<h3>{text(where)}</h3>"
            + (_roofline_note(t["device"], page) if t.has("device") else "")
            + notes(t["notes"])
        )
        parts.append(table(t["targets"], RANK_TARGET_COLUMNS if ranks else TARGET_COLUMNS, f"targets-{k}"))
    return "".join(parts) if len(page["targets"]) else ""


def _trace_projection(p: Node, k: int) -> str:
    e, ps = p["estimate"], p["estimate_per_step_us"]
    head = (
        (
            f'<p class="estimate">Estimate {num(e["speedup"], "x")} (interval {num(e["low"], "x")} to '
            f"{num(e['high'], 'x')}): {num(ps['baseline_us'], 'ms')} ms/step to {num(ps['projected_us'], 'ms')} "
            f"ms/step, {text(e['clock'])} clock ({text(e['method'])}).</p>"
        )
        if e.value
        else ""
    )
    return (
        f"<h3>{text(p['trace'])}</h3>{head}"
        + table(p["projections"], PROJECTION_COLUMNS, f"projection-{k}")
        + table(p["entries"], ENTRY_COLUMNS, f"entries-{k}", "speedup entries")
        + notes(p["warnings"])
    )


def _ranks_projection(p: Node, k: int) -> str:
    s, z = p["synchronised"]["speedups"], p["synchronised"]["zero_time"]
    return (
        f'<h3>{text(p["source"])}</h3><p class="estimate">Synchronised step {num(s["baseline_per_step_us"], "ms")}'
        f" ms to {num(s['per_step_us'], 'ms')} ms ({num(s['gain'], 'pct')} faster); the selected kernels at zero "
        f"time: {num(z['gain'], 'pct')}.</p>"
        + table(p["per_rank_amdahl"], RANK_AMDAHL_COLUMNS, f"projection-{k}", "each rank on its own (Amdahl)")
        + notes(p["warnings"])
    )


def projection_section(doc: Node) -> str:
    ps = doc["page"]["projections"]
    if not len(ps):
        return ""
    parts = [projection_chart(ps)]
    for k, p in enumerate(ps):
        parts.append(_ranks_projection(p, k) if p["kind"].value == "ranks" else _trace_projection(p, k))
    return "".join(parts)


def ranks_section(doc: Node) -> str:
    views = doc["page"]["ranks"]
    if not len(views):
        return ""
    parts = []
    for k, (v, rows) in enumerate(zip(views, doc["rank_sets"])):
        parts.append(
            f"<h3>{text(v['source'])}</h3><p>World size {num(v['world_size'], 'int')}, backend "
            f"{text(v['backend'])}; synchronised step {num(v['step_us'], 'ms')} ms (the longest rank's); "
            f"slowest rank {num(v['slowest_rank'], 'int')}; {num(v['collectives'], 'int')} collectives "
            f"paired.</p>" + notes(v["warnings"])
        )
        parts.append(table(rows["ranks"], RANK_COLUMNS, f"ranks-{k}") + rank_chart(v["bars"]))
        parts.append(table(v["categories"], RANK_CATEGORY_COLUMNS, f"rank-categories-{k}", "categories across ranks"))
    return "".join(parts)


# The page, section by section, in order: (id, heading, the function that draws it from the document;
# "" leaves the section out). A new section is one more entry.
SECTIONS: list[tuple[str, str, Callable[[Node], str]]] = [
    ("summary", "Run summary", summary_section),
    ("categories", "Where the GPU time goes", categories_section),
    ("targets", "Targets", targets_section),
    ("projection", "Projection of the given speedups", projection_section),
    ("ranks", "Ranks", ranks_section),
]

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1200px;
padding:0 16px 40px;color:#222222}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:3px;margin-top:28px}
h3{font-size:15px;margin:18px 0 6px;word-break:break-all}nav a{margin-right:12px}
.scroll{overflow-x:auto}table{border-collapse:collapse;margin:8px 0 12px;font-size:13px}
caption{text-align:left;color:#555555;padding:2px 0}
th,td{padding:3px 8px;border-bottom:1px solid #eee;vertical-align:top}th{cursor:pointer;user-select:none;
background:#f6f6f6;text-align:left;white-space:nowrap}th.num,td.num{text-align:right;font-variant-numeric:tabular-nums}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
ul.note,ul.failed{color:#8a5a00;font-size:12px;margin:4px 0}.sources{color:#555555;font-size:12px;word-break:break-all}
svg.figure{display:block;margin:10px 0;font-size:11px}svg .grid{stroke:#ddd}svg .tick{fill:#777777;font-size:10px}
svg rect.addressable{stroke:#222222;stroke-width:.6}svg rect.idle{stroke:#999999;stroke-width:.6}
svg .whisker{stroke:#222222;stroke-width:1.2;fill:none}svg .level{stroke:#999999;stroke-dasharray:2 2}
footer{margin-top:32px;color:#777777;font-size:12px}
"""

# Sorting: a click on a heading orders the rows by that column's data-value (numbers; an empty value
# last) or by the cell's text, and a second click reverses the order.
SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var down = th.getAttribute("aria-sort") === "ascending";
    table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", down ? "descending" : "ascending");
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    function key(row) {
      var c = row.cells[col], v = c.getAttribute("data-value");
      return v === null ? c.textContent.toLowerCase() : (v === "" ? null : parseFloat(v));
    }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      if (x === null || y === null) { return x === y ? 0 : (x === null ? 1 : -1); }
      return (x < y ? -1 : x > y ? 1 : 0) * (down ? -1 : 1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


# Nothing is fetched when the page is viewed: the browser refuses any load but the inline style and script.
POLICY = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


FOOTER = "times in ms, shares of kernel time unless said otherwise; click a column's heading to sort the table by it."


def frame(title: str, sources: Sequence[Node], sections: Sequence[tuple[str, str, str]], footer: str = FOOTER) -> str:
    """A whole page: its heading, the paths it is about, a link to each section and the sections
    ((id, heading, markup); one whose markup is "" is left out), with the styles, the policy and the
    sorting script inline."""
    shown = [(sid, heading, body) for sid, heading, body in sections if body]
    nav = "".join(f'<a href="#{sid}">{escape(heading)}</a>' for sid, heading, _ in shown)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        f"<title>{escape(title)}</title>"
        f"<style>{CSS}</style></head><body><header><h1>{escape(title)}</h1>"
        f'<p class="sources">{", ".join(text(s) for s in sources)}</p><nav>{nav}</nav></header><main>'
        + "".join(f'<section id="{sid}"><h2>{escape(heading)}</h2>{body}</section>' for sid, heading, body in shown)
        + f"</main><footer>headroom {escape(__version__)}; {escape(footer, quote=False)}</footer>"
        f"<script>{SCRIPT}</script></body></html>\n"
    )


def render_page(doc: dict[str, Any]) -> str:
    """The page of a `report --html --json` document (with its `page` key)."""
    root = Node(doc)
    sources = [t["trace"] for t in root["traces"]] + [r["source"] for r in root["rank_sets"]]
    return frame("headroom report", sources, [(sid, heading, fn(root)) for sid, heading, fn in SECTIONS])


def write_page(path: str | Path, doc: dict[str, Any]) -> Path:
    """Write the page atomically (a failure leaves the old file, or none)."""
    return write_atomic(path, render_page(doc))
