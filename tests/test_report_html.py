"""`headroom report --html FILE`: every number on the page is the `--json` document's (parsed back from the
HTML), the document's parts are the other commands' JSON, the page needs no network, and in a real browser
(Debian's chromium, headless) its tables sort, its figures are drawn and nothing is fetched."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import REPO, SHIPPED_TRACES

from headroom.jsonio import dumps
from headroom.report import svg
from headroom.report.html import render_page
from headroom.report.markup import MISSING, Column, Node, number, table
from tests.ranks_synthetic import write_pair

TRACES = [SHIPPED_TRACES / "bert-base.infer.json.gz", SHIPPED_TRACES / "resnet-50.train.json.gz"]
SPEEDUPS = ["-s", "category:normalization=2", "-f", str(REPO / "examples" / "speedups.toml")]


def headroom(*args: object, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "headroom.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One `report --html --json` over two traces and a directory of two ranks, with speedups."""
    tmp = tmp_path_factory.mktemp("html")
    ranks = write_pair(tmp / "ranks")
    out = tmp / "report.html"
    p = headroom("report", *TRACES, ranks, *SPEEDUPS, "--html", out, "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    return {"doc": json.loads(p.stdout), "html": out.read_text(), "path": out, "ranks": ranks, "tmp": tmp}


class Page(HTMLParser):
    """The page's elements with `data-key`, and the text outside them (the numbers must not be there)."""

    VOID = {"meta", "link", "br", "img", "input", "hr", "path", "line", "rect", "circle"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict]] = []
        self.marked: list[dict] = []  # {"attrs", "text"}
        self.loose: list[str] = []  # text outside any data-key element (and outside ticks, style, script)
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        entry = {"attrs": a, "text": "", "tip": ""} if "data-key" in a else None
        if entry is not None:
            self.marked.append(entry)
        self.stack.append((tag, {**a, "_entry": entry}))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag):
        while self.stack:
            t, _ = self.stack.pop()
            if t == tag:
                break

    def handle_data(self, data):
        in_title = False
        for tag, a in reversed(self.stack):
            in_title = in_title or tag == "title"
            if a.get("_entry") is not None:  # a bar's tooltip says its number: "gemm: 62.1%"
                a["_entry"]["tip" if in_title else "text"] += data
                return
        if any(t in ("style", "script", "footer") or "tick" in a.get("class", "").split() for t, a in self.stack):
            return
        self.loose.append(data)


def parse(html: str) -> Page:
    p = Page()
    p.feed(html)
    return p


def resolve(doc, pointer: str):
    v = doc
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        v = v[int(part)] if isinstance(v, list) else v[part]
    return v


def shown_value(text: str, fmt: str) -> tuple[float, float]:
    """What a reader takes a shown number to be, and half a unit of its last digit (parsed here, not by the
    page's code): "15.63" ms is 15630 us give or take 5."""
    t = text.strip().replace(",", "").rstrip("%x")
    scale = {"ms": 1000.0, "ms3": 1000.0, "dms": 1000.0, "pct": 0.01, "dpct": 0.01}.get(fmt, 1.0)
    decimals = len(t.partition(".")[2])
    return float(t) * scale, 0.5 * 10.0**-decimals * scale * (1 + 1e-9)


def check_numbers(doc: dict, html: str) -> int:
    """Every marked element of the page against the document; no number outside them. Returns how many
    numbers were checked."""
    page = parse(html)
    for m in page.marked:
        a = m["attrs"]
        value = resolve(doc, a["data-key"])
        if "data-value" not in a:  # a text of the document: verbatim (shortened on screen, whole in the tooltip)
            whole = a.get("title", m["tip"] or m["text"])  # an SVG name: whole in its <title>
            assert whole == (
                "" if value is None else ("yes" if value else "no") if isinstance(value, bool) else str(value)
            )
            continue
        if value is None:
            assert a["data-value"] == "" and m["text"].strip() == MISSING, a
            continue
        assert float(a["data-value"]) == value, a
        assert json.dumps(value) == a["data-value"] or json.dumps(float(value)) == a["data-value"], a
        shown, tolerance = shown_value(m["text"] or m["tip"].rsplit(": ", 1)[-1], a["data-fmt"])
        assert abs(shown - value) <= tolerance, (a, m)
    # No number anywhere else: a decimal, or a number with a unit, outside the marked elements.
    loose = [t for t in page.loose if re.search(r"\d\.\d|\d\s*(%|ms\b|us\b|x\b)", t)]
    assert loose == [], loose[:5]
    return sum("data-value" in m["attrs"] for m in page.marked)


def test_every_number_on_the_page_is_the_json_documents(run):
    assert check_numbers(run["doc"], run["html"]) > 300


def test_a_cpu_only_trace_beside_a_gpu_one(builder, tmp_path):
    for k in (1, 2):
        builder.step(k, k * 1000.0, 900.0)
        builder.cpu("aten::mm", k * 1000.0 + 10, 400.0)
        builder.cpu("aten::add", k * 1000.0 + 420, 100.0)
    trace = builder.write(tmp_path / "cpu.json")
    out = tmp_path / "r.html"
    p = headroom("report", trace, TRACES[1], "--html", out, "-s", "category:gemm=2", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [t["mode"] for t in doc["traces"]] == ["cpu-ops", "gpu"] and len(doc["page"]["projections"]) == 2
    assert check_numbers(doc, out.read_text()) > 50


def test_the_page_shows_every_section_and_every_trace(run):
    doc, html = run["doc"], run["html"]
    ids = re.findall(r'<section id="([a-z]+)">', html)
    assert ids == ["summary", "categories", "targets", "projection", "ranks"]
    page = parse(html)
    keys = {m["attrs"]["data-key"] for m in page.marked}
    for i, _row in enumerate(doc["traces"]):
        assert {
            f"/traces/{i}/step_us",
            f"/traces/{i}/unprofiled_step_us",
            f"/traces/{i}/idle_fraction",
            f"/traces/{i}/addressable_fraction",
            f"/traces/{i}/device",
        } <= keys
    w = doc["page"]["categories"]["workloads"]
    assert len(w) == 2 and all(f"/page/categories/workloads/{i}/addressable_fraction" in keys for i in range(2))
    assert all(abs(sum(b["fraction"] for b in x["bars"]) - 1.0) < 1e-9 for x in w)
    assert [t.get("trace") or t.get("source") for t in doc["page"]["targets"]] == [*map(str, TRACES), str(run["ranks"])]
    kinds = {r["kind"] for r in doc["page"]["targets"][0]["targets"]}
    assert kinds == {"op", "module"}
    assert len(doc["page"]["projections"]) == 3 and doc["page"]["projections"][2]["kind"] == "ranks"
    est = doc["page"]["projections"][0]["estimate"]
    assert est["low"] <= est["speedup"] <= est["high"] and "/page/projections/0/estimate/low" in keys
    assert doc["html"] == str(run["path"]) and doc["rank_sets"][0]["ranks"][1]["rank"] == 1
    assert {f"/rank_sets/0/ranks/{r}/comm_exposed_fraction" for r in (0, 1)} <= keys
    assert {f"/page/ranks/0/bars/{r}/comm_exposed_us_per_step" for r in (0, 1)} <= keys


def test_the_documents_parts_are_the_other_commands_json(run):
    """The summary is `report --json`, the targets `targets --json` (without the replay), the projection
    `project --json`, number for number."""
    doc = run["doc"]
    plain = json.loads(headroom("report", *TRACES, run["ranks"], "--json").stdout)
    assert {k: doc[k] for k in ("traces", "rank_sets", "failed")} == {
        k: plain[k] for k in ("traces", "rank_sets", "failed")
    }
    t = json.loads(headroom("targets", TRACES[0], "--top", "10", "--replay-top", "0", "--json").stdout)
    assert {k: v for k, v in t.items() if k != "schema"} == doc["page"]["targets"][0]
    p = json.loads(headroom("project", TRACES[0], *SPEEDUPS, "--json").stdout)
    mine = {k: v for k, v in doc["page"]["projections"][0].items() if k != "estimate_per_step_us"}
    assert {k: v for k, v in p.items() if k != "schema"} == mine
    steps = p["num_steps"]
    assert (
        doc["page"]["projections"][0]["estimate_per_step_us"]["projected_us"] == p["estimate"]["projected_us"] / steps
    )


def test_the_page_is_self_contained(run):
    html = run["html"]
    page = parse(html)
    for tag, a in page.tags:
        for attr in ("src", "href", "srcset", "action", "poster", "data"):
            v = a.get(attr)
            assert v is None or v.startswith("#"), (tag, attr, v)
        if tag == "link":
            pytest.fail(f"a <link>: {a}")
    styles = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert styles and not any(re.search(r"url\(|@import", s) for s in styles)
    assert 'http-equiv="Content-Security-Policy" content="default-src \'none\'' in html
    assert [t for t, _ in page.tags].count("svg") == 3  # categories, projection, ranks


def test_output_paths_are_checked_before_any_work(run, tmp_path):
    trace = run["tmp"] / "copy.json.gz"
    shutil.copy(TRACES[1], trace)
    p = headroom("report", trace, "--html", trace)
    assert p.returncode == 2 and "--html" in p.stderr and "is also an input" in p.stderr
    assert p.stderr.count("\n") == 1
    assert trace.read_bytes() == TRACES[1].read_bytes()
    d = tmp_path / "a-dir"
    d.mkdir()
    p = headroom("report", trace, "--html", d)
    assert p.returncode == 2 and "is a directory" in p.stderr
    p = headroom("report", trace, "-s", "category:gemm=2")
    assert p.returncode == 2 and "--html" in p.stderr
    # Beside the traces is allowed (an .html file is never read as a trace); written whole, path on stdout.
    beside = run["ranks"].parent / "beside.html"
    p = headroom("report", TRACES[1], "--html", beside)
    assert p.returncode == 0 and p.stdout.strip() == str(beside) and beside.read_text().startswith("<!DOCTYPE html>")
    assert not [f for f in beside.parent.iterdir() if f.name.startswith(".beside")]


def test_an_unreadable_trace_is_named_on_the_page_and_exit_is_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = tmp_path / "r.html"
    p = headroom("report", TRACES[1], bad, "--html", out, "--json")
    assert p.returncode == 2 and "bad.json" in p.stderr
    doc = json.loads(p.stdout)
    assert doc["failed"] == [str(bad)] and len(doc["traces"]) == 1
    assert f'data-key="/failed/0">{bad}<' in out.read_text()


def test_the_api_writes_the_same_page(run, tmp_path):
    import headroom as hr

    out = tmp_path / "api.html"
    doc = hr.report_html(
        [*TRACES, run["ranks"]], out, speedup=["category:normalization=2"], files=[REPO / "examples" / "speedups.toml"]
    )
    cli = dict(run["doc"])
    for d in (doc, cli):
        d.pop("html")
        d.pop("schema")
    assert json.loads(dumps(doc)) == cli
    assert out.read_text() == run["html"]


def test_the_command_and_the_api_have_the_same_defaults():
    import inspect

    from headroom import api
    from headroom.cli.trace import report

    cli = {name: p.default.default for name, p in inspect.signature(report).parameters.items()}
    mine = inspect.signature(api.report_html).parameters
    assert (cli["target_speedup"], cli["top"]) == (mine["target_speedup"].default, mine["top"].default) == (1.5, 10)
    assert (cli["roofline"], cli["peaks"]) == (mine["roofline"].default, mine["peaks"].default) == (False, None)


# ---- the roofline bound of the targets (--roofline) -------------------------------------------------------------

ROOFLINE_COLUMNS = [
    "max_speedup",
    "fused_max_speedup",
    "limit",
    "compute_fraction",
    "memory_fraction",
    "achievable_gain",
]


@pytest.fixture(scope="module")
def roofline_run(run):
    out = run["tmp"] / "roofline.html"
    p = headroom("report", *TRACES, run["ranks"], "--html", out, "--roofline", "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    return {"doc": json.loads(p.stdout), "html": out.read_text()}


def _columns(html: str, table_id: str) -> list[str]:
    head = re.search(rf'<table class="sortable" id="{table_id}">.*?</thead>', html, re.S).group(0)
    return re.findall(r'<th data-col="([^"]+)"', head)


def test_with_roofline_the_targets_are_targets_roofline_json_and_every_number_is_on_the_page(roofline_run, run):
    doc, html = roofline_run["doc"], roofline_run["html"]
    for i, trace in enumerate(TRACES):
        t = json.loads(headroom("targets", trace, "--top", "10", "--replay-top", "0", "--roofline", "--json").stdout)
        assert {k: v for k, v in t.items() if k != "schema"} == doc["page"]["targets"][i]
        assert _columns(html, f"targets-{i}")[-6:] == ROOFLINE_COLUMNS
    assert check_numbers(doc, html) > 300
    keys = {m["attrs"]["data-key"] for m in parse(html).marked}
    cells = {
        f"/page/targets/{i}/targets/{k}/{c}"
        for i in (0, 1)
        for k in range(len(doc["page"]["targets"][i]["targets"]))
        for c in ROOFLINE_COLUMNS
    }
    assert (
        len(cells) == 6 * (20 + 18) and cells <= keys
    )  # bert: ten ops, ten modules; resnet-50: ten ops, eight modules
    # The rest of the document is the page's without the bound; a directory of ranks has no roofline.
    assert {k: v for k, v in doc.items() if k not in ("page", "html")} == {
        k: v for k, v in run["doc"].items() if k not in ("page", "html")
    }
    assert "device" not in doc["page"]["targets"][2] and not set(ROOFLINE_COLUMNS) & set(_columns(html, "targets-2"))
    assert not set(ROOFLINE_COLUMNS) & set(_columns(run["html"], "targets-0"))


def test_the_roofline_cells_of_bert_s_gemms(roofline_run):
    t = roofline_run["doc"]["page"]["targets"][0]
    assert t["device"]["key"] == "h200" and t["device"]["memory_tb_s"] == 4.8
    rows = {(r["kind"], r["name"]): (k, r) for k, r in enumerate(t["targets"])}
    k, addmm = rows[("op", "aten::addmm")]
    # The achievable gain: the gain at zero time scaled to the smaller of the bound and the target speedup.
    bound = min(addmm["max_speedup"], 1.5)
    assert addmm["limit"] == "compute" and 1.0 < bound < 1.5
    assert addmm["achievable_gain"] == pytest.approx(addmm["gain_inf"] * (1 - 1 / bound), rel=1e-12)
    html = roofline_run["html"]
    key = f"/page/targets/0/targets/{k}"
    assert f'<td data-key="{key}/limit">compute</td>' in html
    shown = re.search(rf'data-key="{key}/max_speedup" data-value="[^"]+" data-fmt="x">([0-9.]+)x<', html).group(1)
    assert abs(float(shown) - addmm["max_speedup"]) <= 5e-4
    # An op row has no fused bound: its cell says so; a module's has one.
    assert f'data-key="{key}/fused_max_speedup" data-value="" data-fmt="x">{MISSING}<' in html
    assert rows[("module", "LayerNorm")][1]["fused_max_speedup"] >= rows[("module", "LayerNorm")][1]["max_speedup"]
    assert 'Roofline against <span data-key="/page/targets/0/device/name">NVIDIA H200</span>' in html


def test_a_cpu_only_trace_has_no_peaks_and_says_so_on_the_page(builder, tmp_path):
    for k in (1, 2):
        builder.step(k, k * 1000.0, 900.0)
        builder.cpu("aten::mm", k * 1000.0 + 10, 400.0)
    trace = builder.write(tmp_path / "cpu.json")
    out = tmp_path / "r.html"
    p = headroom("report", trace, "--html", out, "--roofline", "--json")
    assert p.returncode == 0, p.stderr
    t = json.loads(p.stdout)["page"]["targets"][0]
    html = out.read_text()
    assert t["device"]["key"] == "cpu" and all(r["max_speedup"] is None for r in t["targets"])
    [note] = [n for n in t["notes"] if "no peaks" in n]
    assert f'<li data-key="/page/targets/0/notes/{t["notes"].index(note)}">{note}</li>' in html
    assert "Roofline against" not in html and check_numbers(json.loads(p.stdout), html) > 10


def test_roofline_options_are_checked_before_any_trace_is_read(tmp_path):
    for args, words in (
        (["--roofline"], "--roofline goes with --html"),
        (["--html", tmp_path / "r.html", "--peaks", "h100"], "--peaks goes with --roofline"),
        (["--html", tmp_path / "r.html", "--roofline", "--peaks", "h900"], "did you mean 'h200'"),
    ):
        p = headroom("report", tmp_path / "missing.json", *args)
        assert p.returncode == 2 and words in p.stderr and p.stderr.count("\n") == 1, p.stderr
    out = tmp_path / "a100.html"
    p = headroom("report", TRACES[1], "--html", out, "--roofline", "--peaks", "a100", "--top", "3", "--json")
    t = json.loads(
        headroom(
            "targets", TRACES[1], "--top", "3", "--replay-top", "0", "--roofline", "--peaks", "a100", "--json"
        ).stdout
    )
    doc = json.loads(p.stdout)
    assert doc["page"]["targets"][0] == {k: v for k, v in t.items() if k != "schema"} and t["device"]["key"] == "a100"
    assert check_numbers(doc, out.read_text()) > 50


# ---- the markup, without traces --------------------------------------------------------------------------------


def test_numbers_are_formatted_and_missing_ones_say_so():
    assert number(15625.49, "ms") == "15.63" and number(0.1376, "pct") == "13.8%" and number(1.04492, "x") == "1.045x"
    assert number(1.5, "factor") == "1.5x" and number(1347, "int") == "1,347"
    assert number(None, "ms") == MISSING and number(float("nan"), "pct") == MISSING and number(True, "int") == MISSING


def test_a_node_knows_its_json_pointer():
    n = Node({"a/b": [{"c~": 1.5}]})
    leaf = n["a/b"][0]["c~"]
    assert leaf.key == "/a~1b/0/c~0" and leaf.raw == "1.5" and resolve(n.value, leaf.key) == 1.5
    assert Node(None, ("x",)).raw == "" and Node(3).raw == "3" and n["missing"]["deeper"].value is None


def test_a_table_marks_each_cell_and_shows_optional_columns_only_when_rows_have_them():
    rows = Node({"rows": [{"name": "a<b", "us": 1500.0}, {"name": "c", "us": None}]})["rows"]
    cols = [Column("name", "name"), Column("us", "ms", "ms"), Column("bound", "bound", "pct", optional=True)]
    html = table(rows, cols, "t")
    assert 'data-key="/rows/0/us" data-value="1500.0" data-fmt="ms">1.50<' in html
    assert 'data-key="/rows/1/us" data-value="" data-fmt="ms">–<' in html and "a&lt;b" in html
    assert "bound" not in html
    with_bound = Node({"rows": [{"name": "a", "us": 1.0, "bound": 0.5}]})["rows"]
    assert 'data-key="/rows/0/bound"' in table(with_bound, cols, "t")
    assert 'class="sortable"' in html and '<th data-col="us"' in html


def _doc(**page) -> dict:
    base = {
        "target_speedup": 1.5,
        "top": 10,
        "categories": {"basis": "kernel", "workloads": []},
        "targets": [],
        "projections": [],
        "ranks": [],
    }
    return {
        "schema": "headroom.report/1",
        "traces": [],
        "rank_sets": [],
        "failed": [],
        "html": "x.html",
        "page": {**base, **page},
    }


def test_sections_without_numbers_are_left_out_and_a_new_one_is_one_entry(monkeypatch):
    from headroom.report import html as page_html

    html = render_page(_doc())
    assert "<section" not in html and "<nav></nav>" in html
    monkeypatch.setattr(page_html, "SECTIONS", [*page_html.SECTIONS, ("diff", "Diff", lambda d: "<p>diff</p>")])
    html = render_page(_doc())
    assert '<section id="diff"><h2>Diff</h2><p>diff</p></section>' in html and 'href="#diff"' in html


def _widths(svg: str) -> dict[str, float]:
    return {k: float(w) for w, k in re.findall(r'<rect[^>]*width="([0-9.]+)"[^>]*data-key="([^"]+)"', svg)}


def test_the_category_chart_stacks_the_shares_to_the_full_length():
    doc = Node(
        {
            "w": [
                {
                    "workload": "w",
                    "addressable_fraction": 0.4,
                    "bars": [
                        {"category": "gemm", "addressable": False, "fraction": 0.6},
                        {"category": "made-up", "addressable": True, "fraction": 0.4},
                    ],
                }
            ]
        }
    )
    out = svg.category_chart(doc["w"])
    widths = _widths(out)
    assert widths == {"/w/0/bars/0/fraction": 0.6 * svg.BAR_W, "/w/0/bars/1/fraction": 0.4 * svg.BAR_W}
    assert 'data-key="/w/0/addressable_fraction" data-value="0.4" data-fmt="pct">40.0%<' in out
    assert "made-up (addressable)" in out and 'class="tick">100%<' in out and out.startswith("<svg")


def test_the_projection_chart_holds_an_estimate_slower_than_the_step():
    est = {"speedup": 0.9, "low": 0.8, "high": 1.1}
    doc = Node(
        {
            "p": [
                {
                    "trace": "t",
                    "estimate": est,
                    "estimate_per_step_us": {
                        "baseline_us": 1000.0,
                        "projected_us": 1111.0,
                        "low_us": 1250.0,
                        "high_us": 909.0,
                    },
                },
                {"trace": "u"},
            ]
        }
    )
    out = svg.projection_chart(doc["p"])
    widths = _widths(out)
    assert widths["/p/0/estimate_per_step_us/baseline_us"] == pytest.approx(svg.BAR_W / 1.25, abs=0.01)
    assert widths["/p/0/estimate_per_step_us/projected_us"] == pytest.approx(svg.BAR_W * 1.111 / 1.25, abs=0.01)
    assert out.count('class="name"') == 1  # the trace without an estimate is left out
    assert svg.projection_chart(Node({"p": []})["p"]) == ""


def test_the_rank_chart_splits_each_step():
    doc = Node(
        {
            "b": [
                {
                    "rank": 0,
                    "step_us": 2000.0,
                    "compute_us_per_step": 1000.0,
                    "comm_exposed_us_per_step": 500.0,
                    "idle_us_per_step": 500.0,
                },
                {
                    "rank": 1,
                    "step_us": 1000.0,
                    "compute_us_per_step": 1000.0,
                    "comm_exposed_us_per_step": 0.0,
                    "idle_us_per_step": 0.0,
                },
            ]
        }
    )
    widths = _widths(svg.rank_chart(doc["b"]))
    assert widths["/b/0/compute_us_per_step"] == widths["/b/1/compute_us_per_step"] == svg.BAR_W / 2
    assert widths["/b/0/idle_us_per_step"] == svg.BAR_W / 4 and widths["/b/1/comm_exposed_us_per_step"] == 0.0


# ---- in a real browser -----------------------------------------------------------------------------------------

CHROMIUM = (
    shutil.which("chromium")
    or shutil.which("chromium-browser")
    or (os.path.exists("/usr/bin/chromium") and "/usr/bin/chromium")
    or None
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run installs it)"
)

# Put first in <head>: records what the browser refuses or fetches. Put last in <body>: clicks a heading
# (twice, for the reverse order) and writes what it saw into the page, which --dump-dom prints.
PROBE_HEAD = """<script>window.__blocked = []; window.__errors = [];
document.addEventListener("securitypolicyviolation", function (e) { window.__blocked.push(e.blockedURI); });
window.addEventListener("error", function (e) { window.__errors.push(String(e.message)); });
var __consoleError = console.error;
console.error = function () { window.__errors.push(Array.prototype.join.call(arguments, " "));
  return __consoleError.apply(console, arguments); };
</script>"""
PROBE_BODY = """<script>
var table = document.getElementById("%(table)s"), th = table.querySelector('th[data-col="%(col)s"]');
function column() { var i = Array.prototype.indexOf.call(th.parentNode.children, th);
  return Array.prototype.map.call(table.tBodies[0].rows, function (r) { return r.cells[i].getAttribute("data-value"); }); }
var result = {before: column()};
th.click(); result.ascending = column(); result.sort1 = th.getAttribute("aria-sort");
th.click(); result.descending = column(); result.sort2 = th.getAttribute("aria-sort");
th.click();
result.figures = Array.prototype.map.call(document.querySelectorAll("svg.figure"), function (s) {
  var r = s.getBoundingClientRect();
  return {figure: s.getAttribute("data-figure"), width: r.width, height: r.height,
          bars: s.querySelectorAll("rect[data-key]").length}; });
setTimeout(function () {
  result.resources = performance.getEntriesByType("resource").map(function (e) { return e.name; });
  result.blocked = window.__blocked;
  result.errors = window.__errors;
  var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
}, 300);
</script>"""


def browse(html: str, tmp: Path, table: str, col: str) -> tuple[dict, str]:
    page = tmp / "probe.html"
    page.write_text(
        html.replace("<head>", "<head>" + PROBE_HEAD, 1).replace(
            "</body>", PROBE_BODY % {"table": table, "col": col} + "</body>", 1
        )
    )
    with tempfile.TemporaryDirectory() as profile:
        p = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=5000",
                "--window-size=1280,2000",
                "--dump-dom",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    found = re.search(r'<pre id="probe">(.*?)</pre>', p.stdout, re.S)
    assert found, (p.returncode, p.stderr[-2000:])
    from html import unescape

    return json.loads(unescape(found.group(1))), p.stdout


@needs_chromium
def test_in_chromium_tables_sort_figures_are_drawn_and_nothing_is_fetched(run, tmp_path):
    doc = run["doc"]
    result, dom = browse(run["html"], tmp_path, "targets-0", "kernels")
    before = [float(v) for v in result["before"]]
    assert before == [float(r["kernels"]) for r in doc["page"]["targets"][0]["targets"]]  # the ranking's order
    assert [float(v) for v in result["ascending"]] == sorted(before) != before
    assert [float(v) for v in result["descending"]] == sorted(before, reverse=True)
    assert (result["sort1"], result["sort2"]) == ("ascending", "descending")
    # The dumped page itself holds the table in the order of the last click (ascending again).
    tbody = re.search(r'<table class="sortable" id="targets-0">.*?<tbody>(.*?)</tbody>', dom, re.S).group(1)
    shown = [
        float(v) for v in re.findall(r'data-key="/page/targets/0/targets/\d+/kernels" data-value="([^"]*)"', tbody)
    ]
    assert shown == sorted(before)
    figures = {f["figure"]: f for f in result["figures"]}
    assert set(figures) == {"categories", "projection", "ranks"}
    assert all(f["width"] > 300 and f["height"] > 30 for f in figures.values())
    assert figures["categories"]["bars"] == sum(len(w["bars"]) for w in doc["page"]["categories"]["workloads"])
    assert figures["ranks"]["bars"] == 3 * 2
    assert result["resources"] == [] and result["blocked"] == [] and result["errors"] == []


@needs_chromium
def test_in_chromium_a_column_with_missing_values_sorts_them_last_both_ways(tmp_path):
    rows = [
        {"workload": w, "step_us": s, "unprofiled_step_us": u}
        for w, s, u in (("a", 3000.0, None), ("b", 1000.0, 5000.0), ("c", 2000.0, 4000.0))
    ]
    doc = _doc()
    doc["traces"] = rows
    result, _ = browse(render_page(doc), tmp_path, "summary-table", "unprofiled_step_us")
    assert result["before"] == ["", "5000.0", "4000.0"]
    assert result["ascending"] == ["4000.0", "5000.0", ""] and result["descending"] == ["5000.0", "4000.0", ""]
    assert result["figures"] == [] and result["resources"] == [] and result["blocked"] == []


@needs_chromium
def test_the_probe_sees_a_resource_the_page_would_fetch(run, tmp_path):
    """The check above is not vacuous: an image asked for (from a server that does not exist) is seen by
    the probe, and the page's own policy refuses it."""
    html = run["html"].replace("</main>", '<img src="http://headroom.invalid/x.png"></main>', 1)
    result, _ = browse(html, tmp_path, "summary-table", "step_us")
    assert result["blocked"] == ["http://headroom.invalid/x.png"]
    # ... and a script error of the page would be seen too.
    broken = run["html"].replace("</main>", "<script>undefinedFunction();</script></main>", 1)
    result, _ = browse(broken, tmp_path, "summary-table", "step_us")
    assert any("undefinedFunction" in e for e in result["errors"])
