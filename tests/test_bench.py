"""DLRM-Bench: every problem loads, runs at CPU scale with a non-degenerate (zero-mean) output, and its
shipped honest candidate passes `headroom verify`; the DLRM cheaters are caught."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from verify_support import assert_caught

from headroom.jsonio import plain
from headroom.suites import dlrm as bench
from headroom.verify import VerifyOptions, prepare_reference, verify_candidate
from headroom.verify import problem as prob

HERE = Path(__file__).resolve().parent
DLRM_CHEATS = HERE / "cheaters" / "dlrm"


def _options() -> VerifyOptions:
    return VerifyOptions.quick(timeout=120, env={bench.SCALE_ENV: "cpu"})


@pytest.fixture(scope="module", autouse=True)
def cpu_scale():
    old = os.environ.get(bench.SCALE_ENV)
    os.environ[bench.SCALE_ENV] = "cpu"
    yield
    if old is None:
        os.environ.pop(bench.SCALE_ENV, None)
    else:
        os.environ[bench.SCALE_ENV] = old


def test_twelve_problems_with_names_shapes_and_candidates():
    assert len(bench.PROBLEMS) == 12
    for p in bench.PROBLEMS:
        assert bench.path(p).is_file(), bench.path(p)
        assert (bench.CANDIDATES_DIR / f"{p.name}.py").is_file()
        prob.check_problem_file(bench.path(p))  # KernelBench format: Model, get_inputs, get_init_inputs
    assert bench.get("5").name == "05_DotInteractionBackward"


@pytest.mark.parametrize("name", bench.NAMES)
def test_problem_runs_at_cpu_scale_with_a_non_degenerate_output(name):
    problem = prob.load_problem(bench.path(bench.get(name)), {bench.SCALE_ENV: "cpu"})
    model = prob.build_model(problem.Model, problem, 1, "cpu")
    xs = prob.published_inputs(problem, 2, "cpu")
    with torch.no_grad():
        out = model(*xs)
    assert isinstance(out, torch.Tensor) and out.is_floating_point() and torch.isfinite(out).all()
    x = out.double()
    std, mean = float(x.std()), float(x.mean())
    assert std > 1e-3
    if name == "10_JaggedSoftmax":  # probabilities: positive, each sequence sums to one
        values, offsets = xs
        assert float(x.min()) > 0
        sums = torch.zeros(offsets.numel() - 1, x.shape[1], dtype=x.dtype).index_add_(
            0, torch.repeat_interleave(torch.arange(offsets.numel() - 1), offsets[1:] - offsets[:-1]), x
        )
        assert torch.allclose(sums, torch.ones_like(sums))
        assert std > 0.3 * mean
    else:
        assert abs(mean) < 0.15 * std, (mean, std)
    # the full size is the default (what a KernelBench harness gets)
    os.environ.pop(bench.SCALE_ENV)
    try:
        full = prob.load_problem(bench.path(bench.get(name)))
    finally:
        os.environ[bench.SCALE_ENV] = "cpu"
    assert full.module.BATCH >= 16384 > problem.module.BATCH


def test_honest_candidates_pass():
    doc = bench.run(options=_options())
    assert doc["suite"] == "DLRM-Bench" and doc["scale"] == "cpu"
    by_problem = {r["problem"]: r for r in doc["results"]}
    assert sorted(by_problem) == sorted(bench.NAMES)
    bad = {
        n: (r["verdict"], r["reason"], [c for c in r["checks"] if not c["passed"]])
        for n, r in by_problem.items()
        if r["verdict"] not in ("pass", "inconclusive") or [c for c in r["checks"] if not c["passed"]]
    }
    assert not bad, bad
    assert all(r["speedup"] > 0 for r in by_problem.values() if r["verdict"] == "pass")


@pytest.mark.parametrize("cheat", sorted(str(p.relative_to(DLRM_CHEATS)) for p in DLRM_CHEATS.glob("*/cheat_*.py")))
def test_dlrm_cheaters_are_caught(cheat):
    problem = bench.path(bench.get(cheat.split("/")[0]))
    ref = prepare_reference(problem, _options())
    try:
        r = verify_candidate(problem, DLRM_CHEATS / cheat, reference=ref)
    finally:
        ref.close()
    assert_caught(r)
    assert r.verdict == "fail", (r.verdict, r.reason, [plain(c) for c in r.checks])


def test_01_reference_is_fbgemms_tbe_with_the_tables_weights_and_falls_back_to_per_table_bags():
    """01's reference runs what `dlrm`'s production path runs (one TBE forward over all tables) where
    fbgemm-gpu imports, else one nn.EmbeddingBag per table; both give the same output from the same seed."""
    pytest.importorskip("fbgemm_gpu")
    problem = prob.load_problem(bench.path(bench.get("01")), {bench.SCALE_ENV: "cpu"})
    assert problem.module.REFERENCE == "fbgemm TBE"
    tbe = prob.build_model(problem.Model, problem, 1, "cpu")
    assert tbe.tbe is not None and not hasattr(tbe, "tables")
    xs = prob.published_inputs(problem, 2, "cpu")
    problem.module._tbe_modules = lambda: None
    bags = prob.build_model(problem.Model, problem, 1, "cpu")
    assert bags.tbe is None and len(bags.tables) == 26
    with torch.no_grad():
        a, b = tbe(*xs), bags(*xs)
    assert a.shape == b.shape == (problem.module.BATCH, 26, problem.module.DIM)
    torch.testing.assert_close(a, b)
