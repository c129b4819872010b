"""`headroom verify` / `headroom bench` on the command line, and the results file `headroom project` reads."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from headroom.cli import verify as cli_verify

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROBLEMS = HERE / "cheaters" / "problems"
CANDIDATES = HERE / "cheaters" / "candidates"
FAST = ["--device", "cpu", "--threads", "1", "--rounds", "6"]


def _app() -> typer.Typer:
    app = typer.Typer()
    cli_verify.register(app)
    return app


def test_verify_json_and_exit_codes(quick_verify_timing):
    runner = CliRunner()
    r = runner.invoke(
        _app(),
        ["verify", str(PROBLEMS / "gelu_linear.py"), str(CANDIDATES / "honest_reimplementation.py"), "--json", *FAST],
    )
    doc = json.loads(r.stdout[r.stdout.index("{") :])
    assert doc["problem"] == "gelu_linear" and not [c for c in doc["checks"] if not c["passed"]]
    if doc["verdict"] == "pass":  # exit 0 only for a conclusive pass
        assert r.exit_code == 0 and doc["speedup"] > 0 and doc["speedup_ci"][0] <= doc["speedup"]
    else:
        assert doc["verdict"] == "inconclusive" and r.exit_code == 1 and doc["speedup"] is None
    r = runner.invoke(_app(), ["verify", str(PROBLEMS / "gelu_linear.py"), str(CANDIDATES / "cheat_zeros.py"), *FAST])
    assert r.exit_code == 1
    assert "FAIL" in r.stdout and "rel_l2" in r.stdout


def test_user_error_is_one_line_and_exit_2(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "headroom.cli", "verify", str(tmp_path / "nope.py"), str(CANDIDATES / "cheat_zeros.py")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "nope.py" in p.stderr


def test_suite_results_file_feeds_headroom_project(tmp_path, quick_verify_timing):
    cands = tmp_path / "candidates"
    (cands / "gelu_linear").mkdir(parents=True)
    shutil.copy(CANDIDATES / "honest_reimplementation.py", cands / "gelu_linear" / "honest.py")
    shutil.copy(CANDIDATES / "cheat_zeros.py", cands / "gelu_linear" / "cheat_zeros.py")
    shutil.copy(CANDIDATES / "honest_clamp.py", cands / "clamp_unit.py")
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("gelu_linear", "clamp_unit", "large_mean"):
        shutil.copy(PROBLEMS / f"{name}.py", suite / f"{name}.py")
    out = tmp_path / "results.json"
    r = CliRunner().invoke(
        _app(), ["verify", "--suite", str(suite), "--candidates", str(cands), "--out", str(out), *FAST]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["tool"] == "headroom verify" and doc["version"] == 1 and doc["device"] == "cpu"
    verdicts = {(x["problem"], Path(x["candidate"]).name): x["verdict"] for x in doc["results"]}
    assert verdicts[("gelu_linear", "cheat_zeros.py")] == "fail"
    honest = [("clamp_unit", "clamp_unit.py"), ("gelu_linear", "honest.py")]
    assert all(verdicts[k] in ("pass", "inconclusive") for k in honest), verdicts
    assert doc["missing_candidates"] == ["large_mean"]

    from headroom.projection.speedups import load_speedup_file

    sf = load_speedup_file(out)
    assert sf.kind == "verify"
    passes = sum(verdicts[k] == "pass" for k in honest)
    assert len(sf.entries) == passes  # only conclusive passes become speedups; the rest warn
    assert any("fail" in w for w in sf.warnings)
    if passes < 2:
        assert any("inconclusive" in w for w in sf.warnings)


def test_bench_list():
    r = CliRunner().invoke(_app(), ["bench", "list", "--json"])
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    assert [x["name"] for x in rows][:2] == ["01_EmbeddingBagSum", "02_WeightedMeanEmbeddingBag"]
    assert len(rows) == 12 and all(x["stands_for"] and x["shapes"] and x["select"] for x in rows)


def test_bad_rounds_is_one_line_and_exit_2():
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "headroom.cli",
            "verify",
            str(PROBLEMS / "gelu_linear.py"),
            str(CANDIDATES / "cheat_zeros.py"),
            "--rounds",
            "6",
            "--scale",
            "tiny",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "--scale tiny" in p.stderr
