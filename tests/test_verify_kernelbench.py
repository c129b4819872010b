"""The KernelBench level-1-style problems in benchmarks/kernelbench_l1 (CPU scale): honest candidates pass,
cheating ones are caught; problem names line up with the projection's problem map."""

from __future__ import annotations

from pathlib import Path

from headroom import bench
from headroom.verify import VerifyOptions, verify_suite

REPO = Path(__file__).resolve().parents[1]
L1 = REPO / "benchmarks" / "kernelbench_l1"


def test_kernelbench_l1_suite_at_cpu_scale():
    problems = sorted(p.stem for p in L1.glob("*.py"))
    assert len(problems) >= 10
    doc = verify_suite(L1, L1 / "candidates", VerifyOptions(device="cpu", threads=1, iters=2, warmup=1, timeout=240,
                                                            env={bench.SCALE_ENV: "cpu"}))
    assert not doc["missing_candidates"]
    results = doc["results"]
    assert {r["problem"] for r in results} == set(problems)
    wrong = [(r["problem"], Path(r["candidate"]).name, r["verdict"], r["reason"]) for r in results
             if (r["verdict"] == "pass") != (not Path(r["candidate"]).name.startswith("cheat_"))]
    assert not wrong, wrong
    cheats = [r for r in results if Path(r["candidate"]).name.startswith("cheat_")]
    assert len(cheats) >= 8
    # KernelBench's own allclose on its own inputs lets some of them through; headroom does not
    assert any(r["info"].get("kernelbench_allclose") for r in cheats)


def test_problem_names_are_known_to_the_projection():
    """Results name their problem; `headroom project` maps the name to kernels (headroom/data/problems.toml)."""
    from headroom.projection.problems import load_problems

    known = load_problems()
    assert all(name in known for name in bench.NAMES)
    l1 = [p.stem for p in L1.glob("*.py")]
    mapped = [n for n in l1 if n in known]
    assert len(mapped) >= len(l1) - 1, sorted(set(l1) - set(mapped))
