"""benchmarks/shapes.py: the text-template writer gives the per-event reference's file byte for byte."""

import filecmp

import pytest

from benchmarks import shapes


@pytest.mark.parametrize("shape", [pytest.param("training", marks=pytest.mark.slow), "inference"])
def test_template_copies_equal_the_reference(tmp_path, shape):
    fast, slow = tmp_path / "fast.json", tmp_path / "slow.json"
    mb = 12 if shape == "training" else 25  # two copies or more: the copies after the first differ
    info = shapes.build(shapes.SHAPES[shape], mb, fast)
    assert info == shapes.build_reference(shapes.SHAPES[shape], mb, slow)
    assert info["copies"] >= 2
    assert filecmp.cmp(fast, slow, shallow=False)
