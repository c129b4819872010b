"""lab/gpu/gpu_recsys.py: the budget and error handling of its steps, and --render, the tables of
docs/dlrm-bench.md recomputed from a results folder (tests/data/recsys_cpu_dryrun/ is a CPU dry run at
tiny shapes, `python3 lab/gpu/gpu_recsys.py --out DIR --dry-run`, not GPU results)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from headroom.pyfile import import_file
from headroom.suites.scoring import score

REPO = Path(__file__).resolve().parents[1]
script = import_file(REPO / "lab" / "gpu" / "gpu_recsys.py", "gpu_recsys")
DRY = REPO / "tests" / "data" / "recsys_cpu_dryrun"
GPU = REPO / "docs" / "gpu" / "recsys"
BEGIN, END = "<!-- recsys-results:begin -->", "<!-- recsys-results:end -->"


def _bench(folder: Path) -> dict:
    with gzip.open(folder / "bench.json.gz", "rt") as f:
        return json.load(f)


def test_render_recomputes_the_dry_run_tables():
    md = script.render(DRY)
    doc = json.loads((DRY / "recsys.json").read_text())
    cov = json.loads((DRY / "coverage.json").read_text())
    assert doc["dry_run"] is True and "CPU dry run (tiny shapes), not GPU results" in md
    assert cov["matched"] == 12 and "Coverage: 12 of 12 problems matched." in md
    for p in cov["problems"]:
        m = p["matches"][0]
        trace = Path(m["trace"]).name.removesuffix(".json.gz")
        assert re.search(rf"^\| {p['name']} \| {re.escape(trace)} \| {100 * m['share']:.2f}% \|", md, re.M), p["name"]
    agg = score(_bench(DRY))
    assert agg.problems == 12
    row = f"| {agg.problems} | {agg.correct} | {agg.wins} | {agg.win_rate:.1%} | {agg.geomean_speedup:.3g}x | "
    assert row in md
    for q in agg.per_problem:
        assert f"| {q.problem} | {q.verdict} |" in md
    v = doc["steps"]["validate dlrm-interaction"]
    assert f"| dlrm | InteractionArch (04, 05) | {100 * (v['measured']['speedup'] - 1):+.2f}%" in md
    for name, rec in doc["steps"].items():
        if name.startswith("profile "):
            assert f"| {name.split(' ', 1)[1]} | {rec['trace'].removesuffix('.json.gz')} |" in md


def test_the_dry_run_kept_to_the_output_limits():
    doc = json.loads((DRY / "recsys.json").read_text())
    files = doc["files"]
    assert 0 < len(files) <= 8 and all(b <= 16 << 20 for b in files.values())
    assert {"recsys.json", "coverage.json", "bench.json.gz", "validate.tar.gz"} <= set(files)
    assert doc["steps"]["check"]["p01_reference"] == "fbgemm TBE" and doc["steps"]["check"]["p01_tbe"]


def test_the_docs_block_is_the_committed_gpu_results():
    text = (REPO / "docs" / "dlrm-bench.md").read_text()
    block = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    assert json.loads((GPU / "recsys.json").read_text())["dry_run"] is False
    assert block == script.render(GPU, REPO / "traces").strip()


def test_the_gpu_results_recomputed_from_the_committed_traces():
    """Coverage over traces/ and the projections come from the traces, not from the GPU run's JSON."""
    cov = script.coverage_of(REPO / "traces")
    assert cov["matched"] == 12 and cov["unmatched"] == []
    by = {p["name"]: {Path(m["trace"]).name.removesuffix(".json.gz"): m for m in p["matches"]} for p in cov["problems"]}
    assert set(by["01_EmbeddingBagSum"]) == {"dlrm.train", "dlrm-dcn.train"}  # not the int8 TBE's nbit:: kernels
    assert set(by["03_Int8RowwiseEmbeddingBag"]) == {"dlrm-int8.infer"}
    assert all("FP16" not in t["name"] for t in by["03_Int8RowwiseEmbeddingBag"]["dlrm-int8.infer"]["top"])
    doc, _, bench_doc = script.load_results(GPU)
    (rc,) = script.scenario_recomputed(GPU, bench_doc)
    part = doc["steps"]["validate dlrm-interaction"]["part"]
    # 04 + 05's selectors pick the substituted module's kernels, all of them.
    assert abs(sum(q["ms_per_step"] for q in rc["parts"]) - rc["module_ms"]) < 0.01 * rc["module_ms"]
    assert abs(rc["module_ms"] - part["base_us"] / 1e3) < 0.01 * rc["module_ms"]
    measured = doc["steps"]["validate dlrm-interaction"]["measured"]["speedup"]
    assert abs(rc["estimate"] / measured - 1) < 0.03
    rows = {r["trace"]: r for r in script.suite_projection(REPO / "traces", bench_doc)}
    assert set(rows) == set(script.RECSYS_TRACES)
    wins = {q.problem.split("_")[0] for q in score(bench_doc).per_problem if q.verdict == "pass" and q.speedup > 1}
    for r in rows.values():
        assert set(r["problems"]) <= wins and r["amdahl"] >= 1.0 and r["ours"] > r["paper"] > 1.0
    assert rows["dlrm.train"]["problems"] == ["04", "05"]


def test_a_step_that_does_not_fit_is_skipped_and_recorded(tmp_path):
    run = script.Run(tmp_path, budget=0.0, dry=True)
    assert run.fits("bench 01_EmbeddingBagSum", 35) is False
    saved = json.loads((tmp_path / "recsys.json").read_text())
    assert saved["skipped"][0]["what"] == "bench 01_EmbeddingBagSum" and saved["skipped"][0]["needed_s"] == 35


def test_a_failing_step_is_recorded_and_the_run_goes_on(tmp_path):
    run = script.Run(tmp_path, budget=100.0, dry=True)
    rec = run.step("boom", lambda: 1 / 0)
    assert rec["status"].startswith("script error: ZeroDivisionError")
    assert run.step("next", lambda: {"value": 2})["status"] == "ok"
    saved = json.loads((tmp_path / "recsys.json").read_text())
    assert list(saved["steps"]) == ["boom", "next"]


def test_render_from_the_command_line(capsys):
    assert script.main(["--render", str(DRY)]) == 0
    assert "| problems | correct | wins |" in capsys.readouterr().out


def test_the_shell_wrapper_puts_the_cuda_fbgemm_first():
    sh = (REPO / "lab" / "gpu" / "gpu_recsys.sh").read_text()
    assert 'PYTHONPATH="$FBGEMM_SITE:${HEADROOM_SITE:-/tmp/site}:$PWD"' in sh and "grep -v fbgemm" in sh
    assert "FBGEMM_SITE=${FBGEMM_SITE:-/var/tmp/fbsite}" in sh


def test_the_scenarios_problems_run_first():
    order = script.bench_order(None)
    assert order[:2] == ["04_DotInteraction", "05_DotInteractionBackward"] and len(order) == 12
    assert order[2] == "01_EmbeddingBagSum" and set(order) == set(script.SUBSTITUTIONS[0][4]) | set(order[2:])
    assert script.bench_order(["9", "5"]) == ["05_DotInteractionBackward", "09_JaggedSum"]


def test_render_merges_a_second_bench_file(tmp_path):
    import shutil

    for f in ("recsys.json", "coverage.json", "bench.json.gz"):
        shutil.copy(DRY / f, tmp_path / f)
    first = _bench(DRY)
    keep = [r for r in first["results"] if r["problem"] != "12_AttentionPooling"]
    with gzip.open(tmp_path / "bench.json.gz", "wt") as f:
        json.dump({**first, "results": keep}, f)
    with gzip.open(tmp_path / "bench-part.json.gz", "wt") as f:
        json.dump(
            {
                **first,
                "results": [
                    {
                        "problem": "12_AttentionPooling",
                        "candidate": "12.py",
                        "verdict": "pass",
                        "speedup": 2.5,
                        "memory_ratio": 1.0,
                    }
                ],
            },
            f,
        )
    md = script.render(tmp_path)
    assert "| 12_AttentionPooling | pass | 2.5x | 1x |" in md
    assert score(script.load_results(tmp_path)[2]).problems == 12


def test_write_docs_replaces_only_the_block(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text(f"intro\n{BEGIN}\nold\n{END}\nafter\n")
    script.write_docs(doc, "| new |\n")
    assert doc.read_text() == f"intro\n{BEGIN}\n| new |\n{END}\nafter\n"
