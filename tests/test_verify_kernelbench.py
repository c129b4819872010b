"""KernelBench's own files, read in place, at CPU-scaled shapes: for every level-1 problem the reference
as candidate is honest and zeros / partial-write / shape-cache candidates fail; sign-only kernels (right
only for KernelBench's torch.rand inputs) fail; the catalogue names every problem.

KernelBench is found through $HEADROOM_KERNELBENCH, ../shared/kernelbench (CI) or /work/shared/kernelbench.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from verify_support import (
    CHEATERS,
    assert_honest,
    assert_value_cheat_fails,
    kernelbench_dir,
    one_harness_thread,  # noqa: F401  (autouse fixture)
)

from headroom.verify import VerifyOptions, prepare_reference, verify_candidate

GENERIC = CHEATERS / "kernelbench"
SIGN_ONLY = sorted(p.stem for p in (GENERIC / "sign_only").glob("*.py"))


def _level1() -> list[str]:
    try:
        kb = kernelbench_dir()
    except pytest.skip.Exception:
        return []
    return sorted((p.stem for p in (kb / "level1").glob("*.py")), key=lambda s: int(s.split("_")[0]))


LEVEL1 = _level1()
# One problem of each kind runs in `make test` (matmul, elementwise, softmax, normalisation, reduction, argmax,
# pooling, convolution, transposed convolution, scan, attention, loss); the rest of the level is `slow`
# (`make test-slow`, CI): the same guarantee, problem by problem.
SAMPLE = {
    "1_Square_matrix_multiplication_",
    "19_ReLU",
    "23_Softmax",
    "36_RMSNorm_",
    "47_Sum_reduction_over_a_dimension",
    "51_Argmax_over_a_dimension",
    "41_Max_Pooling_1D",
    "67_conv_standard_1D",
    "81_conv_transposed_2D_asymmetric_input_square_kernel___dilated____padded____strided__",
    "89_cumsum",
    "97_ScaledDotProductAttention",
    "98_KLDivLoss",
}
SIGN_ONLY_SAMPLE = {"19_ReLU", "38_L1Norm_"}


def _sampled(names: list[str], sample: set[str]) -> list:
    return [pytest.param(n, marks=() if n in sample else pytest.mark.slow) for n in names]


def _options(path: Path) -> VerifyOptions:
    return VerifyOptions.quick(env={"HEADROOM_TEST_PROBLEM": str(path)})


def test_kernelbench_is_complete():
    assert len(LEVEL1) == 100, f"expected KernelBench's 100 level-1 problems in {kernelbench_dir()}"
    assert SAMPLE <= set(LEVEL1) and SIGN_ONLY_SAMPLE <= set(SIGN_ONLY), "a sampled problem is not in KernelBench"


@pytest.mark.parametrize("name", _sampled(LEVEL1, SAMPLE))
def test_level1_reference_is_honest_and_generic_cheats_fail(name):
    path = kernelbench_dir() / "level1" / f"{name}.py"
    ref = prepare_reference(path, _options(path))
    try:
        assert ref.error is None, ref.error
        assert ref.estimate is not None and ref.estimate.harness_peak_bytes <= 64 << 20, ref.estimate
        results = {
            c: verify_candidate(path, GENERIC / f"{c}.py", reference=ref)
            for c in ("reference", "zeros", "partial_write", "shape_cache")
        }
    finally:
        ref.close()
    honest = results["reference"]
    assert_honest(honest)
    assert honest.launches_per_call["reference"] >= 1 and honest.launches_per_call["candidate"] >= 1
    # Which value check fires first depends on the inputs (drawn afresh each run) and on the memory the allocator
    # hands back: a partial write over a stale block holding the right values was caught only while timed
    # (timed_outputs, 81_conv_transposed_2D). The guarantee is the verdict.
    # Zeros are wrong in every trial: always a fail.
    assert_value_cheat_fails(results["zeros"], "zeros")
    for cheat in ("partial_write", "shape_cache"):
        assert_value_cheat_fails(results[cheat], cheat, stale=True)


@pytest.mark.parametrize("name", _sampled(SIGN_ONLY, SIGN_ONLY_SAMPLE))
def test_sign_only_kernels_fail_on_signed_inputs(name):
    """Right on torch.rand (KernelBench's own allclose accepts them on its inputs), wrong on signed ones."""
    path = kernelbench_dir() / "level1" / f"{name}.py"
    r = verify_candidate(path, GENERIC / "sign_only" / f"{name}.py", _options(path))
    assert_value_cheat_fails(r, name)
    assert r.info["signed_inputs"] == [True]
    if "kernelbench_allclose" in r.info:
        assert r.info["kernelbench_allclose"] is True  # its own check, on its own inputs, passes the cheat


def test_cumprod_reference_passes_with_its_own_overflow_excused():
    path = kernelbench_dir() / "level1" / "90_cumprod.py"
    r = verify_candidate(path, GENERIC / "reference.py", _options(path))
    assert_honest(r)
    finite = next(c for c in r.checks if c.name == "finite")
    assert finite.passed


def test_product_reduction_reference_passes(tmp_path):
    """The older KernelBench problem 50 (torch.prod over a dimension): ill-conditioned, honest passes."""
    p = tmp_path / "50_Product_reduction_over_a_dimension.py"
    p.write_text(
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self, dim):\n"
        "        super().__init__()\n        self.dim = dim\n\n    def forward(self, x):\n"
        "        return torch.prod(x, dim=self.dim)\n\nbatch_size = 128\ndim1 = 256\n\n"
        "def get_inputs():\n    return [torch.rand(batch_size, dim1)]\n\ndef get_init_inputs():\n"
        "    return [1]\n"
    )
    r = verify_candidate(p, GENERIC / "reference.py", VerifyOptions.quick(env={"HEADROOM_TEST_PROBLEM": str(p)}))
    assert_honest(r)


def test_every_level1_problem_is_known_to_the_projection():
    """Results name their problem; `headroom project` maps the name to kernels (problems.toml)."""
    from headroom.projection.problems import load_problems

    known = load_problems()
    missing = [n for n in LEVEL1 if n not in known]
    assert not missing, missing
