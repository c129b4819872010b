"""`headroom diff` and `headroom.diff`: two runs compared, checked against numbers computed apart from it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, TraceBuilder

import headroom as hr
from headroom.errors import UserError
from headroom.report.diff import diff, waterfall_table
from headroom.report.plot import waterfall_figure
from headroom.trace.analysis import analyze
from tests.ranks_synthetic import write_pair

VALIDATION = REPO / "docs" / "gpu" / "validation"
RUNS = sorted(p.name for p in VALIDATION.iterdir() if (p / "base.json.gz").is_file())


# --- the committed validation runs: base and variant traces of one substitution each ----------------


@pytest.fixture(scope="module")
def pairs():
    cache = {}

    def get(run: str):
        if run not in cache:
            d = VALIDATION / run
            cache[run] = (
                analyze(d / "base.json.gz"),
                analyze(d / "variant.json.gz"),
                json.loads((d / "result.json").read_text()),
            )
        return cache[run]

    return get


def test_every_validation_run_is_covered():
    assert len(RUNS) == 5


@pytest.mark.parametrize("run", RUNS)
def test_the_replaced_module_reproduces_the_measured_part_times(pairs, run):
    base, variant, result = pairs(run)
    d = diff(base, variant, by="module")
    module = result["replacements"][0]["module"]
    row = d.rows[d.rows["key"] == module].iloc[0]
    # The module swapped for the candidate's ModelNew at the same paths: one row, before and after.
    assert row["status"] == "replaced" and row["name"] == f"{module} -> ModelNew"
    assert row["before_us"] == pytest.approx(result["part"]["base_us"], rel=0.01)
    assert row["after_us"] == pytest.approx(result["part"]["variant_us"], rel=0.01)


@pytest.mark.parametrize("run", RUNS)
def test_step_times_are_those_classify_and_the_manifests_report(pairs, run, headroom):
    base, variant, result = pairs(run)
    d = diff(base, variant)
    steps = []
    for name in ("base.json.gz", "variant.json.gz"):
        r = headroom("classify", VALIDATION / run / name, "--json")
        assert r.returncode == 0, r.stderr
        steps.append(json.loads(r.stdout)["step_us"])
    assert (d.profiled.before_us, d.profiled.after_us) == (steps[0], steps[1])
    assert d.profiled.speedup == steps[0] / steps[1]
    # The unprofiled steps are the timed ones validate measured (milliseconds in result.json).
    assert d.unprofiled.before_us == pytest.approx(1e3 * result["measured"]["base_ms"], rel=1e-12)
    assert d.unprofiled.after_us == pytest.approx(1e3 * result["measured"]["variant_ms"], rel=1e-12)
    assert d.step is d.unprofiled


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("by", ["category", "op", "module", "kernel"])
def test_rows_add_up_to_the_totals(pairs, run, by):
    base, variant, _ = pairs(run)
    d = diff(base, variant, by=by)
    r = d.rows
    # Kernel time per step, from the analyses' own totals.
    total_b, total_a = base.total_us / base.num_steps, variant.total_us / variant.num_steps
    assert r["before_us"].sum() == pytest.approx(total_b, rel=1e-9)
    assert r["after_us"].sum() == pytest.approx(total_a, rel=1e-9)
    assert r["delta_us"].sum() == pytest.approx(total_a - total_b, rel=1e-6, abs=1e-6)
    assert r["share"].sum() == pytest.approx(1.0, rel=1e-9)
    # Busy-time deltas plus the idle delta: the step's change (one device per trace here).
    idle = variant.idle_us / variant.num_steps - base.idle_us / base.num_steps
    assert r["delta_wall_us"].sum() + idle == pytest.approx(variant.step_us - base.step_us, abs=1e-6)
    w = d.waterfall()
    assert w["delta_ms"].iloc[0] + w["delta_ms"].iloc[1:-1].sum() == pytest.approx(w["delta_ms"].iloc[-1], abs=1e-9)


def test_categories_of_the_llama_prefill_run(pairs):
    base, variant, _ = pairs("llama7b-prefill-rmsnorm")
    d = diff(base, variant)
    norm = d.rows.set_index("key").loc["normalization"]
    ev_b, ev_a = base.events, variant.events
    assert norm["before_us"] == pytest.approx(ev_b.loc[ev_b["category"] == "normalization", "dur"].sum() / 3)
    assert norm["after_us"] == pytest.approx(ev_a.loc[ev_a["category"] == "normalization", "dur"].sum() / 3)
    assert d.rows.iloc[0]["key"] == "normalization"  # the largest change first


# --- synthetic traces with a known answer ------------------------------------------------------------------


def _run(
    path: Path,
    kernels: list[tuple[str, str, float]],
    step_ms: float | None = None,
    workload: str = "toy",
    steps: int = 2,
) -> Path:
    """`steps` steps of 1000 us; each launches `kernels` (kernel name, op, GPU µs) back to back."""
    b = TraceBuilder()
    for k in range(steps):
        t0 = 1000.0 * k
        b.step(k + 1, t0, 900.0)
        gpu = t0 + 10.0
        for i, (kname, op, dur) in enumerate(kernels):
            ext = b.cpu(op, t0 + 1 + 5 * i, 4.0)
            b.kernel(kname, t0 + 2 + 5 * i, gpu, dur, ext=ext)
            gpu += dur
    manifest = {"workload": workload, "variant": "infer"}
    if step_ms is not None:
        manifest["timing"] = {"step_ms": step_ms}
    return b.write(path, headroom=manifest)


@pytest.fixture
def toy(tmp_path):
    before = _run(
        tmp_path / "before.json",
        [
            ("gemm_kernel", "aten::mm", 300.0),
            ("triton_poi_fused_add_0", "aten::add", 50.0),
            ("old_kernel", "aten::mul", 100.0),
        ],
        step_ms=1.0,
    )
    after = _run(
        tmp_path / "after.json",
        [
            ("gemm_kernel", "aten::mm", 200.0),
            ("triton_poi_fused_add_7", "aten::add", 40.0),
            ("new_kernel", "aten::div", 60.0),
        ],
        step_ms=0.9,
    )
    return before, after


def test_rows_of_a_known_pair(toy):
    d = hr.diff(*toy, by="kernel")
    rows = d.rows.set_index("name")
    # Two steps, each with these kernel times: per step they are the times themselves.
    assert rows.loc["gemm_kernel", ["before_us", "after_us", "delta_us"]].tolist() == [300.0, 200.0, -100.0]
    # The renamed Triton kernel of one launch site is one row.
    assert rows.loc["triton_*", "status"] == "same" and rows.loc["triton_*", "delta_us"] == -10.0
    assert rows.loc["old_kernel", "status"] == "removed" and rows.loc["new_kernel", "status"] == "added"
    # Total kernel time 450 -> 300 us per step: a -150 us change.
    assert d.kernel_us == (450.0, 300.0)
    assert rows.loc["gemm_kernel", "share"] == pytest.approx(100 / 150)
    assert rows.loc["new_kernel", "share"] == pytest.approx(-60 / 150)
    assert d.unprofiled.before_us == 1000.0 and d.unprofiled.after_us == 900.0
    assert d.step.speedup == pytest.approx(1000 / 900)
    by_op = hr.diff(*toy, by="op").rows.set_index("name")
    assert by_op.loc["aten::div", "status"] == "added" and by_op.loc["aten::mul", "status"] == "removed"


def test_without_unprofiled_steps_the_profiled_ones_lead(tmp_path, headroom):
    a = _run(tmp_path / "a.json", [("k", "aten::mm", 300.0)])
    b = _run(tmp_path / "b.json", [("k", "aten::mm", 1000.0)])
    d = hr.diff(a, b)
    assert d.unprofiled is None and d.step is d.profiled and d.notes
    # The window runs from the first step's start to the later of the last step's end (1000 + 900) and the
    # last kernel's end: 1000 + 10 + 300 before, 1000 + 10 + 1000 after; two steps.
    assert d.profiled.before_us == pytest.approx(1900 / 2)
    assert d.profiled.after_us == pytest.approx(2010 / 2)
    assert headroom("diff", a, b, "--fail-if-slower", "5.7").returncode == 1  # 5.79% slower
    assert headroom("diff", a, b, "--fail-if-slower", "5.8").returncode == 0


def test_directories_of_ranks_are_one_run_each(tmp_path):
    before = write_pair(tmp_path / "before", delay=500.0)
    after = write_pair(tmp_path / "after", delay=100.0)
    d = hr.diff(before, after, by="kernel")
    # The synchronised step is the slowest rank's; rank 1's gemm is `delay` longer than rank 0's 1000 us.
    from tests.ranks_synthetic import GEMM

    gemm = d.rows.set_index("name").loc[GEMM]
    assert gemm["before_us"] == pytest.approx(1000.0 + 1500.0) and gemm["after_us"] == pytest.approx(1000.0 + 1100.0)
    assert d.profiled.after_us < d.profiled.before_us and d.idle_us is None
    assert d.labels[0].endswith("(2 ranks)")


def test_bad_groupings_and_mismatched_runs(toy, tmp_path):
    with pytest.raises(UserError, match="unknown grouping"):
        hr.diff(*toy, by="stream")
    other = _run(tmp_path / "other.json", [("k", "aten::mm", 1.0)], workload="other")
    with pytest.raises(UserError, match="one workload"):
        hr.diff(toy[0], other)


# --- the command line -------------------------------------------------------------------------------------


def test_the_gate_exit_codes(toy, headroom):
    before, after = toy
    assert headroom("diff", before, after, "--fail-if-slower", "0").returncode == 0  # 10% faster
    slower = headroom("diff", after, before, "--fail-if-slower", "5")  # 11.1% slower
    assert slower.returncode == 1 and "over --fail-if-slower 5%" in slower.stderr
    assert headroom("diff", after, before, "--fail-if-slower", "12").returncode == 0
    r = headroom("diff", after, before, "--fail-if-slower", "11", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["gate"] == {"fail_if_slower_pct": 11.0, "slower": True}
    assert doc["schema"] == "headroom.diff/1" and doc["step"]["change"] == pytest.approx(1000 / 900 - 1)


def test_json_and_table(toy, headroom):
    r = headroom("diff", *toy, "--by", "kernel", "--json")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc == json.loads(json.dumps(headroom_api_doc(toy)))
    t = headroom("diff", *toy)
    assert t.returncode == 0 and "unprofiled step: 1.000 -> 0.900 ms/step" in t.stdout and "speedup 1.1111x" in t.stdout


def headroom_api_doc(toy) -> dict:
    from headroom.cli.output import document
    from headroom.jsonio import dumps, plain

    body = plain(hr.diff(*toy, by="kernel"))
    body["gate"] = None
    return json.loads(dumps(document("diff", body)))


@pytest.mark.parametrize(
    "args, words",
    [
        (["missing.json", "traces/dlrm.train.json.gz"], "no such file"),
        (["README.md", "traces/dlrm.train.json.gz"], "invalid JSON"),
        (["traces/dlrm.train.json.gz", "traces/bert-base.infer.json.gz"], "one workload"),
        (["traces/dlrm.train.json.gz", "traces"], "not the ranks of one run"),
        (["traces/dlrm.train.json.gz", "traces/dlrm.train.json.gz", "--by", "stream"], "stream"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(headroom, args, words):
    r = headroom("diff", *args)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.count("headroom: error:") == 1 and r.stdout == ""


def test_the_waterfall_figure(toy, headroom, tmp_path):
    out = tmp_path / "w.b.svg"
    r = headroom("diff", *toy, "--figure", out)
    assert r.returncode == 0 and out.is_file() and not (tmp_path / "w.svg").exists()
    d = diff(analyze(toy[0]), analyze(toy[1]), by="op")
    table = waterfall_table(d)
    fig = waterfall_figure(table)
    bars = {p.get_gid(): p.get_width() for p in fig.axes[0].patches}
    assert bars["before|start"] == pytest.approx(d.profiled.before_us / 1e3)
    assert bars["after|end"] == pytest.approx(d.profiled.after_us / 1e3)
    assert bars["aten::mm|delta"] == pytest.approx(-0.1)
    assert headroom("diff", *toy, "--figure", tmp_path / "w.gif").returncode == 2
    assert headroom("diff", *toy, "--figure", toy[0]).returncode == 2  # never over an input
    assert np.isclose(table["delta_ms"].iloc[0] + table["delta_ms"].iloc[1:-1].sum(), table["delta_ms"].iloc[-1])
