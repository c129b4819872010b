"""`headroom diff BEFORE AFTER --html FILE`: every number on the page is the `diff --html --json` document's
(checked as the report page's are: tests/test_report_html.py), the document is `diff --json` plus the page's
waterfall, and in headless chromium the rows sort, the waterfall is drawn and nothing is fetched."""

from __future__ import annotations

import inspect
import json
import re

import pytest
from conftest import REPO
from test_diff import _run as write_run
from test_report_html import browse, check_numbers, needs_chromium, parse

import headroom as hr
from headroom.errors import UserError
from headroom.report import svg
from headroom.report.markup import Node
from tests.ranks_synthetic import write_pair

VALIDATION = REPO / "docs" / "gpu" / "validation" / "llama7b-prefill-rmsnorm"


@pytest.fixture
def toy(tmp_path):
    """Two steps of 1000 us each (900 us ProfilerStep ranges); kernel time 450 -> 300 us per step."""
    before = write_run(
        tmp_path / "before.json",
        [
            ("gemm_kernel", "aten::mm", 300.0),
            ("triton_poi_fused_add_0", "aten::add", 50.0),
            ("old_kernel", "aten::mul", 100.0),
        ],
        step_ms=1.0,
    )
    after = write_run(
        tmp_path / "after.json",
        [
            ("gemm_kernel", "aten::mm", 200.0),
            ("triton_poi_fused_add_7", "aten::add", 40.0),
            ("new_kernel", "aten::div", 60.0),
        ],
        step_ms=0.9,
    )
    return before, after


def page_of(headroom, *args):
    r = headroom("diff", *args, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    return doc, open(doc["html"]).read()


def test_the_page_of_a_known_pair(toy, headroom, tmp_path):
    out = tmp_path / "d.html"
    doc, html = page_of(headroom, *toy, "--by", "kernel", "--html", out)
    assert doc["html"] == str(out) and check_numbers(doc, html) > 60
    # The document is `diff --json`'s, plus the page's waterfall.
    plain = json.loads(headroom("diff", *toy, "--by", "kernel", "--json").stdout)
    assert {k: v for k, v in doc.items() if k not in ("html", "page")} == plain
    # The profiled step is 950 us on both sides (1900 us over two steps): deltas -100, -10, -100, +60 us of
    # busy time, and the idle per step grows by the 150 us the kernels no longer take.
    bars = [(b["label"], b["kind"], b["start_us"], b["delta_us"]) for b in doc["page"]["waterfall"]]
    assert bars == (
        [
            ("before", "start", 0.0, 950.0),
            ("gemm_kernel", "delta", 950.0, -100.0),
            ("old_kernel", "delta", 850.0, -100.0),
            ("new_kernel", "delta", 750.0, 60.0),
            ("triton_*", "delta", 810.0, -10.0),
            ("(idle)", "delta", 800.0, 150.0),
            ("after", "end", 0.0, 950.0),
        ]
    )
    w = hr.diff(*toy, by="kernel").waterfall()
    assert [b["delta_us"] for b in doc["page"]["waterfall"]] == pytest.approx((w["delta_ms"] * 1e3).tolist(), rel=1e-12)
    # The rows, largest change first, with signed deltas and the unprofiled clock leading.
    assert [r["name"] for r in doc["rows"]] == ["gemm_kernel", "old_kernel", "new_kernel", "triton_*"]
    assert 'data-key="/rows/0/delta_us" data-value="-100.0" data-fmt="dms">-0.100<' in html
    assert 'data-key="/rows/2/delta_us" data-value="60.0" data-fmt="dms">+0.060<' in html
    assert 'data-key="/unprofiled/after_us" data-value="900.0" data-fmt="ms3">0.900<' in html
    assert re.search(r'data-key="/step/speedup" data-value="1\.111\d*" data-fmt="x">1\.111x<', html)
    assert 'data-key="/step/change" data-value="-0.09999999999999998" data-fmt="dpct">-10.00%<' in html
    # Added and removed rows in tables of their own.
    for status, name in (("added", "new_kernel"), ("removed", "old_kernel")):
        body = re.search(rf'<table class="sortable" id="rows-{status}">.*?</table>', html, re.S).group(0)
        assert re.findall(r'data-key="/rows/(\d+)/name">([^<]*)<', body) == [
            (str([r["name"] for r in doc["rows"]].index(name)), name)
        ]
    assert 'id="rows-replaced"' not in html
    ids = re.findall(r'<section id="([a-z]+)">', html)
    assert ids == ["step", "waterfall", "rows", "added"]
    assert [t for t, _ in parse(html).tags].count("svg") == 1
    assert 'http-equiv="Content-Security-Policy" content="default-src \'none\'' in html


def test_a_replaced_module_and_directories_of_ranks(headroom, tmp_path):
    doc, html = page_of(
        headroom,
        VALIDATION / "base.json.gz",
        VALIDATION / "variant.json.gz",
        "--by",
        "module",
        "--html",
        tmp_path / "m.html",
    )
    assert check_numbers(doc, html) > 50
    replaced = [r for r in doc["rows"] if r["status"] == "replaced"]
    assert [r["name"] for r in replaced] == ["LlamaRMSNorm -> ModelNew"] and 'id="rows-replaced"' in html
    # The waterfall's bars add up from the step before to the step after.
    w = doc["page"]["waterfall"]
    assert w[0]["delta_us"] + sum(b["delta_us"] for b in w[1:-1]) == pytest.approx(w[-1]["delta_us"], abs=1e-6)
    before, after = write_pair(tmp_path / "before", delay=500.0), write_pair(tmp_path / "after", delay=100.0)
    doc, html = page_of(headroom, before, after, "--html", tmp_path / "r.html")
    assert doc["idle_us"] is None and check_numbers(doc, html) > 20
    assert "(idle)" not in [b["label"] for b in doc["page"]["waterfall"]] and "idle per step" not in html


def test_the_waterfall_chart_scales_the_levels_the_deltas_move_between():
    rows = Node(
        {
            "w": [
                {"label": "before", "kind": "start", "start_us": 0.0, "delta_us": 1000.0},
                {"label": "a" * 60, "kind": "delta", "start_us": 1000.0, "delta_us": -200.0},
                {"label": "b", "kind": "delta", "start_us": 800.0, "delta_us": 50.0},
                {"label": "after", "kind": "end", "start_us": 0.0, "delta_us": 850.0},
            ]
        }
    )["w"]
    out = svg.waterfall_chart(rows)
    rects = {
        k: (float(x), float(w), fill)
        for x, w, fill, k in re.findall(
            r'<rect x="([0-9.]+)" y="[^"]*" width="([0-9.]+)" height="\d+" fill="([^"]+)"[^>]*'
            r'data-key="([^"]+)"',
            out,
        )
    }
    # Levels 800 to 1000 us, padded by 15% of that: the axis runs 770 to 1030 us over BAR_W.
    span = 260.0
    assert rects["/w/1/delta_us"] == pytest.approx(
        (svg.LABEL_W + 30 / span * svg.BAR_W, 200 / span * svg.BAR_W, "#2ca02c"), abs=0.01
    )
    assert rects["/w/2/delta_us"] == pytest.approx(
        (svg.LABEL_W + 30 / span * svg.BAR_W, 50 / span * svg.BAR_W, "#d62728"), abs=0.01
    )
    # The whole steps run in from the axis' left edge.
    assert rects["/w/0/delta_us"] == pytest.approx((svg.LABEL_W, 230 / span * svg.BAR_W, "#7f7f7f"), abs=0.01)
    assert rects["/w/3/delta_us"] == pytest.approx((svg.LABEL_W, 80 / span * svg.BAR_W, "#7f7f7f"), abs=0.01)
    assert 'data-value="-200.0" data-fmt="dms">-0.200</tspan> ms' in out and 'class="tick">0.770 ms<' in out
    # A long name: whole in its tooltip, at most 40 characters on screen.
    shown = re.search(rf'data-key="/w/1/label"><title>{"a" * 60}</title>([^<]*)</text>', out).group(1)
    assert len(shown) <= 40 and shown.startswith("aaaa") and "…" in shown
    assert svg.waterfall_chart(Node({"w": []})["w"]) == ""


def test_output_paths_are_checked_before_any_work(toy, headroom, tmp_path):
    before, after = toy
    kept = before.read_bytes()
    r = headroom("diff", before, after, "--html", before)
    assert r.returncode == 2 and "--html" in r.stderr and "is also an input" in r.stderr and r.stdout == ""
    assert before.read_bytes() == kept
    # The page's path is refused before the traces are read: a missing trace is not what is named.
    (tmp_path / "a-file").write_text("")
    r = headroom("diff", tmp_path / "missing.json", after, "--html", tmp_path / "a-file" / "d.html")
    assert r.returncode == 2 and "is not a directory" in r.stderr and "missing.json" not in r.stderr
    r = headroom("diff", before, after, "--html", tmp_path)
    assert r.returncode == 2 and "is a directory" in r.stderr
    r = headroom("diff", before, after, "--html", tmp_path / "w.svg", "--figure", tmp_path / "w.svg")
    assert r.returncode == 2 and "--figure" in r.stderr and not (tmp_path / "w.svg").exists()
    # Written whole, in place of an older page; stdout has its path; no temporary file left beside it.
    out = tmp_path / "d.html"
    out.write_text("old")
    r = headroom("diff", before, after, "--html", out)
    assert r.returncode == 0 and r.stdout.strip() == str(out) and out.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "after.json", "before.json", "d.html"]


def test_the_gate_is_on_the_page_and_exits_1(toy, headroom, tmp_path):
    out = tmp_path / "d.html"
    r = headroom("diff", toy[1], toy[0], "--fail-if-slower", "5", "--html", out, "--json")
    assert r.returncode == 1 and "over --fail-if-slower 5%" in r.stderr
    doc = json.loads(r.stdout)
    html = out.read_text()
    assert doc["gate"] == {"fail_if_slower_pct": 5.0, "slower": True} and check_numbers(doc, html) > 40
    assert 'data-key="/gate/fail_if_slower_pct" data-value="5.0" data-fmt="num">5.0</span> percent: slower' in html


def test_the_api_writes_the_same_page_with_the_commands_defaults(toy, headroom, tmp_path):
    from headroom import api
    from headroom.cli.diff import diff_cmd

    cli, html = page_of(headroom, *toy, "--html", tmp_path / "cli.html")
    out = tmp_path / "api.html"
    doc = hr.diff_html(*toy, out)
    assert {**doc, "html": None} == {**cli, "html": None} and doc["by"] == "category"
    assert out.read_text() == html
    cli_by = inspect.signature(diff_cmd).parameters["by"].default.default
    assert (
        cli_by
        == inspect.signature(api.diff_html).parameters["by"].default
        == inspect.signature(api.diff).parameters["by"].default
        == "category"
    )
    with pytest.raises(UserError, match="is also an input"):
        hr.diff_html(toy[0], toy[1], toy[0])


@needs_chromium
def test_in_chromium_the_rows_sort_the_waterfall_is_drawn_and_nothing_is_fetched(toy, headroom, tmp_path):
    doc, html = page_of(headroom, *toy, "--by", "kernel", "--html", tmp_path / "d.html")
    result, dom = browse(html, tmp_path, "diff-rows", "delta_us")
    deltas = [r["delta_us"] for r in doc["rows"]]
    assert [float(v) for v in result["before"]] == deltas == [-100.0, -100.0, 60.0, -10.0]
    assert [float(v) for v in result["ascending"]] == sorted(deltas)
    assert [float(v) for v in result["descending"]] == sorted(deltas, reverse=True)
    assert (result["sort1"], result["sort2"]) == ("ascending", "descending")
    [figure] = result["figures"]
    assert figure["figure"] == "waterfall" and figure["bars"] == len(doc["page"]["waterfall"]) == 7
    assert figure["width"] > 300 and figure["height"] > 100
    assert result["resources"] == [] and result["blocked"] == [] and result["errors"] == []
