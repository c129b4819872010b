"""headroom.verify building blocks, in-process (no child processes): inputs, measures, digests, wire, loading."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from headroom.errors import UserError
from headroom.verify import checks as ck
from headroom.verify import inputs as inp
from headroom.verify import problem as prob
from headroom.verify import wire

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE / "cheaters" / "problems"


def test_trial_specs_are_fresh_per_secret_and_reproducible():
    a, b = inp.trial_specs(1), inp.trial_specs(2)
    assert [s.to_dict() for s in a] == [s.to_dict() for s in inp.trial_specs(1)]
    assert [s.seed for s in a] != [s.seed for s in b]
    assert sorted(s.family for s in a[:4]) == sorted(inp.FAMILIES)
    assert [s.kind for s in a[4:]] == ["scaled", "shifted", "published"]
    assert a[4].reuse_buffers and a[5].reuse_buffers and a[4].family == a[3].family


@pytest.mark.parametrize("family", inp.FAMILIES)
def test_families_are_zero_mean_and_deterministic(family):
    spec = inp.trial_specs(7)
    params = next(s.params for s in spec if s.family == family)
    x = inp.draw(family, params, (200_000,), torch.float32, "cpu", 11)
    assert torch.equal(x, inp.draw(family, params, (200_000,), torch.float32, "cpu", 11))
    assert torch.isfinite(x).all()
    assert abs(float(x.double().mean())) < 0.05 * float(x.double().std())
    if family == "mixed_scales":
        mags = x.abs()
        assert float(mags.min()) < 1e-2 and float(mags.max()) > 1e2


def test_trial_inputs_keep_structure_and_reuse_buffers():
    problem = prob.load_problem(PROBLEMS / "clamp_unit.py")
    specs = inp.trial_specs(3)
    first = inp.make_trial_inputs(problem, specs[3], "cpu")
    assert float(first[0].min()) >= 0  # non-negative template: draws in absolute value
    again = inp.make_trial_inputs(problem, specs[3], "cpu")
    assert torch.equal(first[0], again[0])
    ptr = first[0].data_ptr()
    scaled = inp.make_trial_inputs(problem, specs[4], "cpu", previous=first)
    assert scaled[0].data_ptr() == ptr  # same buffer, new values: defeats data_ptr caches
    assert torch.allclose(scaled[0], again[0] * specs[4].factor)
    published = inp.make_trial_inputs(problem, specs[6], "cpu")
    assert float(published[0].max()) < 1.0  # get_inputs() as written


def test_discrete_float_labels_are_kept():
    labels = torch.randint(0, 2, (1000,)).float() * 2 - 1
    assert inp.is_discrete(labels)
    assert not inp.is_discrete(torch.randn(1000))


def test_measure_zeros_constant_and_exact_copy():
    t = torch.randn(1000, dtype=torch.float64) + 1e5
    assert ck.measure(t.float(), t).rel_l2 < 1e-7
    zeros = ck.measure(torch.zeros(1000), t)
    assert zeros.rel_l2 == pytest.approx(1.0)
    const = ck.measure(torch.full((1000,), float(t.mean())), t)
    assert const.rel_l2 < 2e-5 and const.centred == pytest.approx(1.0, rel=1e-3)  # only centred catches it
    nan = torch.randn(1000)
    nan[5] = float("nan")
    e = ck.measure(nan, torch.randn(1000, dtype=torch.float64))
    assert not e.finite_ok and e.nonfinite == 1


def test_gates_follow_the_reference_error_and_dtype_floor():
    assert ck.gates_for(torch.float32, ck.Errors(1e-9, 1e-9, 1e-9, True, 0)).rel_l2 == ck.FLOORS["float32"][0]
    g = ck.gates_for(torch.float32, ck.Errors(5e-4, 2e-3, 5e-4, True, 0))  # a TF32 reference
    assert g.rel_l2 == pytest.approx(ck.ERROR_FACTOR * 5e-4)
    assert ck.gates_for(torch.bfloat16, None).rel_l2 > ck.gates_for(torch.float32, None).rel_l2


def test_digest_sees_any_change_and_swaps():
    x = torch.randn(10_000)
    d = ck.digest(x)
    y = x.clone()
    y[17] = torch.nextafter(y[17], torch.tensor(math.inf))
    assert ck.digest(y) != d
    z = x.clone()
    z[[3, 4]] = z[[4, 3]]
    assert ck.digest(z) != d
    assert ck.digest(x.clone()) == d
    assert ck.digest(torch.arange(10)) != ck.digest(torch.arange(10).int())


def test_fingerprints_tell_fresh_from_stale():
    w = ck.projection_weights(5000, 9, "cpu")
    r = torch.randn(5000)
    honest = ck.fingerprint(r + 1e-7 * torch.randn(5000), w)
    stale = ck.fingerprint(torch.randn(5000), w)
    ref = ck.fingerprint(r, w)
    assert ck.fingerprint_matches(honest, ref, 2e-5)[0]
    assert not ck.fingerprint_matches(stale, ref, 2e-5)[0]
    assert ck.fingerprint_matches(ck.fingerprint(torch.arange(5), w), ck.fingerprint(torch.arange(5), w), 0)[0]


def test_wire_roundtrip_and_rejects_bad_payloads():
    blobs: list = []
    t = torch.randn(3, 4).to(torch.bfloat16)
    meta = wire.encode_tensor(t, blobs)
    back = wire.decode_tensor(wire.public(meta), blobs, "cpu")
    assert back.dtype == torch.bfloat16 and torch.equal(back, t)
    with pytest.raises(ValueError):
        wire.decode_tensor({**meta, "shape": [5, 4]}, blobs, "cpu")
    with pytest.raises(ValueError):
        wire.decode_tensor({**meta, "dtype": "object"}, blobs, "cpu")


def test_problem_loading_errors_name_the_file(tmp_path):
    with pytest.raises(UserError, match="not found"):
        prob.load_problem(tmp_path / "missing.py")
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model: pass\n")
    with pytest.raises(UserError, match="bad.py: not a KernelBench problem: .*get_inputs"):
        prob.load_problem(bad)
    broken = tmp_path / "broken.py"
    broken.write_text("def get_inputs(:\n")
    with pytest.raises(UserError, match="broken.py: syntax error"):
        prob.check_problem_file(broken)


def test_models_are_built_identically_from_the_same_seed():
    problem = prob.load_problem(PROBLEMS / "gelu_linear.py")
    a = prob.build_model(problem.Model, problem, 5, "cpu")
    b = prob.build_model(problem.Model, problem, 5, "cpu")
    c = prob.build_model(problem.Model, problem, 6, "cpu")
    assert torch.equal(a.linear.weight, b.linear.weight)
    assert not torch.equal(a.linear.weight, c.linear.weight)
