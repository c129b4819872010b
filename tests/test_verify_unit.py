"""headroom.verify building blocks in-process (no child processes): protocol, inputs, measures, timing
statistics, scaling, the shared ring, the suite catalogues."""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest
import torch

from headroom.errors import UserError
from headroom.jsonio import plain
from headroom.verify import checks as ck
from headroom.verify import compare as cmp
from headroom.verify import inputs as inp
from headroom.verify import problem as prob
from headroom.verify import protocol as P
from headroom.verify import ring as input_ring
from headroom.verify import scale as sc
from headroom.verify import shared
from headroom.verify import timing as tm

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE / "cheaters" / "problems"


# --- protocol -------------------------------------------------------------------------------


def test_protocol_round_trips_and_rejects_what_was_not_asked_for():
    cmd = P.Run(seq=7, batches=[[P.RingTensor(256, "float32", (2, 3), (3, 1)), P.Scalar(0.5)]], tf32=False)
    assert P.decode_command(P.encode(cmd)) == cmd
    reply = P.RunDone(seq=7, outputs=[[P.AddrTensor(4096, "float32", (2, 3), (3, 1))]], child_ms=[0.25], violations=[])
    assert P.decode_reply(P.encode(reply)) == reply
    assert P.EXPECTED_REPLY[P.Run] is P.RunDone and P.EXPECTED_REPLY[P.Trial] is P.TrialDone
    with pytest.raises(msgspec.ValidationError):  # a command is not a reply
        P.decode_reply(P.encode(cmd))
    with pytest.raises(msgspec.ValidationError):  # unknown fields are refused, not ignored
        P.decode_reply(msgspec.msgpack.encode({"type": "done", "seq": 1, "violations": [], "speedup": 99.0}))
    with pytest.raises(msgspec.DecodeError):
        P.decode_reply(b"\xc1garbage")


# --- inputs ---------------------------------------------------------------------------------


def test_trial_plan_is_fresh_unless_a_seed_is_fixed_and_seeds_are_drawn_per_trial():
    a, b = inp.plan_trials(inp.Seeds()), inp.plan_trials(inp.Seeds())
    assert sorted(s.family for s in a[:4]) == sorted(inp.FAMILIES)
    assert [s.kind for s in a[4:]] == ["scaled", "shifted", "published"]
    assert all(s.seed == 0 for s in a)  # no value seed exists before its trial starts
    fixed = inp.Seeds(5)
    x, y = inp.plan_trials(fixed), inp.plan_trials(inp.Seeds(5))
    assert [plain(s) for s in x] == [plain(s) for s in y]
    inp.seed_trial(x[3], fixed, x[2])
    inp.seed_trial(x[4], fixed, x[3])
    assert x[4].seed == x[3].seed != 0 and set(fixed.drawn) == {"plan", "trial3.values", "trial3.base"}
    assert a[0].params != b[0].params or a[0].family != b[0].family or a[1].params != b[1].params


@pytest.mark.parametrize("family", inp.FAMILIES)
def test_every_family_is_signed_and_zero_mean(family):
    params = next(s.params for s in inp.plan_trials(inp.Seeds(7)) if s.family == family)
    x = inp.draw(family, params, (200_000,), torch.float32, "cpu", 11)
    assert torch.equal(x, inp.draw(family, params, (200_000,), torch.float32, "cpu", 11))
    assert float((x < 0).double().mean()) == pytest.approx(0.5, abs=0.01)
    assert abs(float(x.double().mean())) < 0.05 * float(x.double().std())


def test_non_negative_templates_get_signed_values_labels_and_integers_keep_theirs():
    templates = [torch.rand(64, 32), (torch.randint(0, 2, (64,)) * 2 - 1).float(), torch.randint(0, 10, (64,))]
    drawn = inp.drawn_positions(templates)
    assert drawn == [True, False, False]
    out = inp.transform(templates, "normal", {"sigma": 1.0}, 3, [True, True, True], drawn=drawn)
    assert float(out[0].min()) < 0 < float(out[0].max())  # torch.rand's template, signed values
    assert out[1] is templates[1] and out[2] is templates[2]


def _problem_file(tmp_path: Path, name: str, body: str, inputs: str, init: str = "[]") -> Path:
    p = tmp_path / f"{name}.py"
    p.write_text(
        f"import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, *xs):\n"
        f"        {body}\n\n{inputs}\n\ndef get_init_inputs():\n    return {init}\n"
    )
    return p


def test_sign_probe_falls_back_only_where_the_reference_is_undefined(tmp_path):
    kl = _problem_file(
        tmp_path,
        "kl",
        "return torch.log(xs[0]) * xs[1]",
        "def get_inputs():\n    return [torch.rand(8, 16), torch.rand(8, 16)]",
    )
    prod = _problem_file(
        tmp_path, "prod", "return torch.cumprod(xs[0] * 10, 1)", "def get_inputs():\n    return [torch.rand(4, 4000)]"
    )
    for path, expect, phrase in (
        (kl, [False, True], "input 0 non-negative"),
        (prod, [True], "do not come from negative inputs"),
    ):
        p = prob.load_problem(path)
        model = prob.build_model(p.Model, p, 1, "cpu")
        drawn = inp.drawn_positions(prob.published_inputs(p, 1, "cpu"))
        signed, note = inp.probe_signs(p, model, "cpu", 2, drawn)
        assert signed == expect and phrase in note, note


# --- measures and gates -----------------------------------------------------------------------


def test_measure_zeros_constant_and_exact_copy():
    t = torch.randn(1000, dtype=torch.float64) + 1e5
    assert ck.measure(t.float(), t).rel_l2 < 1e-7
    assert ck.measure(torch.zeros(1000), t).rel_l2 == pytest.approx(1.0)
    const = ck.measure(torch.full((1000,), float(t.mean())), t)
    assert const.rel_l2 < 2e-5 and const.centred == pytest.approx(1.0, rel=1e-3)  # only centred catches it
    nan = torch.randn(1000)
    nan[5] = float("nan")
    e = ck.measure(nan, torch.randn(1000, dtype=torch.float64))
    assert not e.finite_ok and e.nonfinite == 1


def test_reference_overflow_is_the_references_error_not_the_candidates():
    x = torch.randn(4, 3000, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    truth, ref = torch.cumprod(x, 1), torch.cumprod(x.float(), 1)
    n_excused = int((~torch.isfinite(ref) & torch.isfinite(truth)).sum())
    assert n_excused > 1000
    # beyond float32's range the truth as float32 holds it is inf: the reference's inf is exact
    assert ck.measure(ref, truth).finite_ok
    e = ck.measure(ref.clone(), truth, ref)
    assert e.finite_ok and e.reference_nonfinite == n_excused and e.rel_l2 < 1e-5
    wrong = ref.clone()
    wrong[torch.isfinite(ref)] = float("inf")  # non-finite where both truth and reference are finite
    assert not ck.measure(wrong, truth, ref).finite_ok


def test_errors_stay_finite_where_the_float64_truth_is_too_large_to_square():
    # A cumulative product the fp32 reference underflows to 0 while float64 climbs back to 1e308 (90_cumprod
    # on mixed_scales at 32768 x 32768): the norms overflow float64 (inf / inf = NaN failed the reference
    # itself). Beyond float32's range the truth is inf as float32 holds it, and left out of the norms.
    truth = torch.tensor([1.0, 1e-50, 1e308, 1.5e308, 2.0], dtype=torch.float64)
    ref = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0])
    e = ck.measure(ref, truth, ref)
    assert e.finite_ok and e.rel_l2 == pytest.approx(1e-50 / math.sqrt(5 + 1e-100), rel=1e-6)
    g = ck.gates_for(torch.float32, e)
    assert g.rel_l2 == ck.FLOORS["float32"][0]  # the gate stays at its floor
    assert ck.measure(ref.clone(), truth, ref).rel_l2 <= g.rel_l2  # the identical candidate passes
    zeros = ck.measure(torch.zeros(5), truth, ref)
    assert zeros.finite_ok and zeros.rel_l2 == pytest.approx(1.0) and zeros.rel_l2 > g.rel_l2
    # float64 outputs keep the huge values: the scaled sums give the finite error a plain sum cannot
    t64 = torch.tensor([1e308, 1.5e308, 1.7e308], dtype=torch.float64)
    e64 = ck.measure(t64 * (1 + 1e-9), t64)
    assert e64.rel_l2 == pytest.approx(1e-9, rel=1e-3) and e64.centred is not None and math.isfinite(e64.centred)
    assert math.isfinite(ck.measure(-t64, t64).rel_l2) and ck.measure(-t64, t64).rel_l2 == pytest.approx(2.0)
    s = ck.SumSq()
    for v in ([3.0, 1e-300], [4e200], []):
        s.add(torch.tensor(v, dtype=torch.float64))
    assert s.norm() == pytest.approx(4e200, rel=1e-12)


def test_a_non_finite_truth_needs_the_same_non_finite_value():
    truth = torch.tensor([1.0, math.inf, -math.inf, math.nan, 2.0], dtype=torch.float64)
    ok = torch.tensor([1.0, math.inf, -math.inf, math.nan, 2.0])
    assert ck.measure(ok, truth, ok).finite_ok and ck.measure(ok, truth, ok).rel_l2 == 0.0
    for bad in (
        [1.0, -math.inf, -math.inf, math.nan, 2.0],
        [1.0, math.inf, -math.inf, 0.0, 2.0],
        [1.0, 3e38, -math.inf, math.nan, 2.0],
    ):
        e = ck.measure(torch.tensor(bad), truth, ok)
        assert not e.finite_ok and e.nonfinite == 1 and e.truth_nonfinite == 1
    e = ck.measure(torch.tensor([math.nan, math.inf, -math.inf, math.nan, 2.0]), truth, ok)
    assert e.nonfinite == 1 and e.truth_nonfinite == 0  # NaN where the truth is finite


def test_measure_in_chunks_equals_one_pass():
    t = torch.randn(10_000, dtype=torch.float64)
    c = (t + 1e-3 * torch.randn(10_000, dtype=torch.float64)).float()
    a, b = ck.measure(c, t), ck.measure(c, t, chunk=777)
    assert a.rel_l2 == pytest.approx(b.rel_l2, rel=1e-9) and a.elem == pytest.approx(b.elem, rel=1e-12)
    assert a.centred == pytest.approx(b.centred, rel=1e-9)


def test_gates_follow_the_reference_error_and_dtype_floor():
    assert ck.gates_for(torch.float32, ck.Errors(1e-9, 1e-9, 1e-9, True, 0)).rel_l2 == ck.FLOORS["float32"][0]
    assert ck.gates_for(torch.float32, ck.Errors(5e-4, 2e-3, 5e-4, True, 0)).rel_l2 == pytest.approx(2e-3)
    assert ck.gates_for(torch.bfloat16, None).rel_l2 > ck.gates_for(torch.float32, None).rel_l2


def test_digest_sees_any_change():
    x = torch.randn(10_000)
    y = x.clone()
    y[17] = torch.nextafter(y[17], torch.tensor(math.inf))
    z = x.clone()
    z[[3, 4]] = z[[4, 3]]
    assert len({ck.digest(x), ck.digest(y), ck.digest(z)}) == 3 and ck.digest(x.clone()) == ck.digest(x)


def test_timed_samples_tell_fresh_from_stale():
    r = torch.randn(256)
    g = ck.gates_for(torch.float32, None)
    rms = float(r.pow(2).mean().sqrt())
    assert ck.samples_match(r + 1e-7 * torch.randn(256), r, g, rms)[0]
    ok, detail = ck.samples_match(torch.randn(256), r, g, rms)
    assert not ok and "sampled element error" in detail
    nan = r.clone()
    nan[3] = float("nan")
    assert not ck.samples_match(nan, r, g, rms)[0]
    assert ck.samples_match(torch.arange(5), torch.arange(5), None, 0.0) == (True, "exact")


def test_timed_samples_catch_an_answer_one_format_coarser_than_its_trials():
    """Rounded to 10 mantissa bits: within 4x the per-element gate, 14x the relative L2 gate."""
    r = torch.randn(8192)
    g = ck.gates_for(torch.float32, None)
    rms = float(r.pow(2).mean().sqrt())
    coarse = ((r.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)
    assert ck.samples_match(coarse, r, g, rms)[0]
    ok, detail = ck.samples_rel_l2_match(*ck.samples_sq_error(coarse, r, rms), g)
    assert not ok and "sampled relative L2 error 2." in detail and "allowed 2.00e-05" in detail, detail
    honest = r + 1e-6 * rms * torch.randn(8192)  # a different summation order
    assert ck.samples_rel_l2_match(*ck.samples_sq_error(honest, r, rms), g)[0]
    nan = r.clone()
    nan[:10] = float("nan")
    assert ck.samples_sq_error(nan, nan, rms) == (0.0, 8182)
    assert ck.samples_sq_error(torch.arange(5), torch.arange(5), 1.0) == (0.0, 0)


def test_the_timed_l2_bound_follows_the_candidates_own_trials():
    """Twice its trial error plus the reference's, never below the gate: a candidate as precise as a TF32
    reference in its trials (error r, gate 4r) may not drop to bfloat16 (8r) while timed."""
    r = 5e-4
    g = ck.Gates(4 * r, 1e-2, 4 * r, ck.Errors(rel_l2=r, elem=2 * r, centred=r, finite_ok=True, nonfinite=0))
    recs = [cmp.TrialRecord("a", [g], [], [], [r]), cmp.TrialRecord("b", [g], [], [], [0.5 * r])]
    (timed,) = cmp.out_gates(recs)
    assert timed.timed_l2 == pytest.approx(4 * r) and timed.rel_l2 == 4 * r
    assert not ck.samples_rel_l2_match((8 * r) ** 2 * 1000, 1000, timed)[0]
    assert ck.samples_rel_l2_match((1.5 * r) ** 2 * 1000, 1000, timed)[0]
    near = [cmp.TrialRecord("a", [g], [], [], [3.9 * r])]  # near the gate in its trials: 2 x (3.9r + r)
    assert cmp.out_gates(near)[0].timed_l2 == pytest.approx(9.8 * r)
    assert ck.timed_l2_bound(2e-5, 1e-7, 1e-7) == 2e-5  # the trial gate is the floor


def test_trials_and_timed_calls_run_under_one_checked_state():
    from headroom.verify import child

    calls = child._Calls()
    n = torch.get_num_threads()
    with calls.call(True):
        assert not torch.is_grad_enabled() and not torch.are_deterministic_algorithms_enabled()
        torch.set_num_threads(n + 1)  # the model's own change, inside a call: it carries over
        first = child.torch_state()
        calls.returned()
    with calls.call(True):
        assert child.torch_state() == first and first["num_threads"] == n + 1
        calls.returned()
    torch.set_num_threads(n)
    calls.outside()
    with calls.call(False):  # the strict-FP32 reference arm: the TF32 flags alone differ
        calls.returned()
    torch.set_default_dtype(torch.float64)  # changed between calls, outside them
    try:
        with pytest.raises(child.StateMismatch, match="default_dtype: 'torch.float32' -> 'torch.float64'"):
            with calls.call(True):
                pass
    finally:
        torch.set_default_dtype(torch.float32)
    calls.outside()  # after a memory or launches command: grad mode and TF32 flags are not compared
    with calls.call(True):
        calls.returned()
    assert torch.get_num_threads() == n and torch.is_grad_enabled()


def test_released_outputs_are_poisoned_but_never_the_ring_or_the_model():
    from headroom.verify import child

    model = torch.nn.Linear(4, 3)
    ring = torch.zeros(64, dtype=torch.uint8)
    out, other = torch.randn(5, 3), torch.arange(6)
    w = model.weight.detach().clone()
    prims = child._Prims(torch.device("cpu"))
    child._poison([[out, out[1:], model.weight], [other, ring[8:16].view(torch.float32)]], model, ring, prims)
    assert bool(out.isnan().all()) and bool((other == -1).all())
    assert bool((ring == 0).all()) and torch.equal(model.weight.detach(), w)


def test_sensitivity_catches_a_constant_answer_but_not_an_invariant_function():
    g = ck.gates_for(torch.float32, None)
    t1, t2 = torch.randn(100, dtype=torch.float64), torch.randn(100, dtype=torch.float64)
    recs = [cmp.TrialRecord("a", [g], [cmp.sketch(t1)], ["d1"]), cmp.TrialRecord("b", [g], [cmp.sketch(t2)], ["d1"])]
    agg = cmp.Agg("sensitivity")
    cmp.sensitivity(recs, agg)
    assert not agg.passed and "bit-identical" in agg.fail_detail
    same = [cmp.TrialRecord("a", [g], [cmp.sketch(t1)], ["d1"]), cmp.TrialRecord("b", [g], [cmp.sketch(t1)], ["d1"])]
    agg = cmp.Agg("sensitivity")
    cmp.sensitivity(same, agg)
    assert agg.passed and not agg.applicable  # truth unchanged: nothing to require


# --- timing statistics ----------------------------------------------------------------------------


def test_median_interval_from_order_statistics():
    assert tm.median_ci([1.0] * 5) is None  # 5 rounds cannot give 95%
    lo, hi, cov = tm.median_ci([5, 1, 4, 2, 6, 3])
    assert (lo, hi) == (1, 6) and cov == pytest.approx(1 - 2 / 64)
    lo, hi, cov = tm.median_ci(list(range(1, 11)))
    assert (lo, hi) == (2, 9) and cov == pytest.approx(1 - 2 * 11 / 1024)


def test_a_childs_wait_counts_only_where_it_can_stretch_the_clock():
    # gated and not blocked: the child was frozen from the gate's opening to the flag
    assert tm.clock_wait(0.73, gated=True, blocked=False) is None
    # the gate opened while it was still enqueuing, or a plain phase: its CPU is inside the clock
    assert tm.clock_wait(0.73, gated=True, blocked=True) == 0.73
    assert tm.clock_wait(0.73, gated=False, blocked=False) == 0.73


def test_judge_calls_a_tight_speedup_and_refuses_noise_load_and_drift():
    policy = tm.Policy()
    ref = [2.0, 2.02, 1.98, 2.01, 1.99, 2.0]
    good = tm.judge(ref, [1.0, 1.01, 0.99, 1.0, 1.0, 1.01], policy, {"candidate": 0.01}, 1.0)
    assert good.reasons == [] and good.speedup == pytest.approx(2.0, rel=0.02) and good.ci[0] > 1.9
    noisy = tm.judge(ref, [0.5, 2.0, 1.0, 3.0, 0.7, 1.1], policy, {}, 1.0)
    assert any("wider than" in r for r in noisy.reasons)
    loaded = tm.judge(ref, [1.0] * 6, policy, {"reference": 0.6}, 1.0)
    assert any("waited for a CPU 60%" in r for r in loaded.reasons)
    drifted = tm.judge(ref, [1.0] * 6, policy, {}, 2.0)
    assert any("2.00x its calibrated time" in r for r in drifted.reasons)
    faster = tm.judge(ref, [1.0] * 6, policy, {}, 0.6)  # a reference that sped up cannot inflate the speedup
    assert faster.reasons == [] and faster.speedup == pytest.approx(2.0)
    assert tm.round_order(["a", "b"], 0) == ["a", "b"] and tm.round_order(["a", "b"], 1) == ["b", "a"]


def test_a_pass_needs_a_bounded_interval_and_both_round_orders_agreeing():
    policy = tm.Policy()
    # wide, but wholly above 1: once a conclusive speedup "somewhere in [1.01, 3]"; now too wide to call
    wide = tm.judge([1.0] * 8, [0.99, 0.5, 0.34, 0.9, 0.6, 0.4, 0.8, 0.45], policy, {}, 1.0)
    assert any("wider than 1.25x" in r for r in wide.reasons)
    # a speedup in the rounds that time the candidate first only (odd rounds): what it leaves for the reference
    ref = [2.0 if r % 2 else 1.0 for r in range(12)]
    one_order = tm.judge(ref, [1.0] * 12, policy, {}, 1.0)
    assert tm.order_medians(ref, [1.0] * 12) == (1.0, 2.0)
    assert any("round orders disagree" in r for r in one_order.reasons)
    # even a tight interval: 1.12x in one order, 1.0x in the other
    ref = [1.12 if r % 2 else 1.0 for r in range(12)]
    assert any("round orders disagree" in r for r in tm.judge(ref, [1.0] * 12, policy, {}, 1.0).reasons)
    slow = tm.judge([1.0] * 8, [2.0, 2.02, 1.98, 2.0, 2.01, 1.99, 2.0, 2.0], policy, {}, 1.0)  # twice the work
    assert slow.reasons == [] and slow.speedup == pytest.approx(0.5, rel=0.02)
    assert tm.order_medians([1.0] * 5, [1.0] * 5) is None  # fewer than 3 rounds of an order: not judged


def test_a_reference_charged_more_cpu_than_alone_is_not_called():
    policy = tm.Policy()
    ok = tm.judge([1.0] * 8, [0.5] * 8, policy, {}, 1.0, 1.1)
    assert ok.reasons == []
    stormed = tm.judge([1.0] * 8, [0.5] * 8, policy, {}, 1.0, 1.43)
    assert any("1.43x its calibrated CPU time" in r for r in stormed.reasons)


def test_cross_check_flags_impossible_clocks_only():
    assert tm.cross_check(10.0, 8.5) is None
    assert tm.cross_check(10.0, 0.5) is None  # less is not judged: the harness's clock decides
    assert "inside a phase that lasted" in tm.cross_check(10.0, 30.0)
    assert tm.iterations(0.1, 25.0, 200, 1000) == 200 and tm.iterations(50.0, 25.0, 200, 1000) == 1
    assert tm.iterations(0.1, 25.0, 200, 7) == 7


# --- scaling and the ring ---------------------------------------------------------------------------


def test_scaling_halves_sizes_together_where_they_must_match(tmp_path):
    p = _problem_file(
        tmp_path,
        "hinge",
        "return torch.mean(torch.clamp(1 - xs[0] * xs[1], min=0))",
        "batch_size = 32768\ninput_shape = (32768,)\nkernel = 3\n\n"
        "def get_inputs():\n    return [torch.rand(batch_size, *input_shape), torch.rand(batch_size)]",
    )
    full = sc.estimate(prob.load_problem(p))
    assert full.inputs_bytes == 32768 * 32768 * 4 + 32768 * 4
    plan = sc.plan(p, {}, 16 << 20, 2e7)
    assert plan.scaled.harness_peak_bytes <= 16 << 20 and "kernel" not in plan.overrides
    scaled = prob.load_problem(p, overrides=plan.overrides)
    assert scaled.module.batch_size == scaled.module.input_shape[0] < 32768  # the broadcast still holds
    assert plan.full.inputs_bytes == full.inputs_bytes


def test_ring_places_views_both_processes_can_name(tmp_path):
    ring = input_ring.Ring(1 << 20, "cpu")
    try:
        xs = [torch.randn(4, 5), torch.randn(6, 3).t(), 2.5]
        args, views = ring.place([xs])
        assert isinstance(args[0][2], P.Scalar) and args[0][2].value == 2.5
        assert args[0][1].stride == (1, 3)  # a transposed input stays transposed
        for a, v, x in zip(args[0][:2], views[0][:2], xs[:2]):
            assert torch.equal(shared.view(ring.buf, a), x) and torch.equal(v, x)
        again, _ = ring.place([[torch.zeros(4, 5), torch.zeros(6, 3).t(), 1.0]], layout=args)
        assert again[0][0].offset == args[0][0].offset and float(views[0][0].abs().sum()) == 0.0
        with pytest.raises(ValueError):
            shared.view(ring.buf, P.RingTensor(ring.nbytes - 4, "float32", (8,), (1,)))
    finally:
        ring.close()


def test_staged_inputs_reach_the_ring_only_on_commit_and_in_one_copy():
    ring = input_ring.Ring(1 << 20, "cpu")
    try:
        xs = [torch.randn(4, 5), torch.randn(6, 3).t(), 2.5]
        args, _ = ring.place([xs], write=False)
        new = [torch.randn(4, 5), torch.randn(6, 3).t(), 2.5]
        nbytes = ring.stage([new], args)
        assert nbytes == args[0][1].offset + 18 * 4  # up to the end of the last tensor, gaps included
        assert not torch.equal(shared.view(ring.buf, args[0][0]), new[0])  # staged, not yet written
        ring.commit(nbytes)
        for a, x in zip(args[0][:2], new[:2]):
            assert torch.equal(shared.view(ring.buf, a), x)
    finally:
        ring.close()


def test_only_the_candidates_write_and_read_beyond_the_references_envelope_is_charged():
    from headroom.verify.session import Phase, ReferenceTiming

    def phase(flag, read, write, null=False):
        return Phase(
            flag + read, read, 0.0, None, True, False, 0.0, [], [], 0, [], [], flag_ms=flag, write_ms=write, null=null
        )

    rt = ReferenceTiming(child=None, n=10, max_numel=0, null_flag_min_ms=0.2, read_max_ms=1.0, write_max_ms=2.0)
    slow = phase(flag=10.2, read=1.5, write=2.5)  # 0.5 + 0.5 ms beyond the envelope
    assert rt.net_ms(slow, 10) == pytest.approx(1.0)  # the reference's own jitter: never charged
    assert rt.net_ms(slow, 10, charged=True) == pytest.approx(1.1)
    rt.widen(phase(flag=10.2, read=1.2, write=2.4))  # a later reference phase widens the envelope
    rt.widen(phase(flag=0.2, read=9.0, write=9.0, null=True))  # a null phase does not
    assert (rt.read_max_ms, rt.write_max_ms) == (1.2, 2.4)
    assert rt.net_ms(slow, 10, charged=True) == pytest.approx((10.0 + 0.3 + 0.1) / 10)


# --- loading ----------------------------------------------------------------------------------------


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
    a, b, c = (prob.build_model(problem.Model, problem, s, "cpu") for s in (5, 5, 6))
    assert torch.equal(a.linear.weight, b.linear.weight) and not torch.equal(a.linear.weight, c.linear.weight)


def test_problems_toml_is_generated_from_the_suite_catalogues():
    """headroom/data/problems.toml (read by `headroom project`) is the catalogues' output, byte for byte."""
    from headroom.suites import catalogue, dlrm

    assert catalogue.PROBLEMS_TOML.read_text() == catalogue.problems_toml()
    kb = catalogue.load("kernelbench_l1")
    assert {p.suite for p in kb} == {"KernelBench/level1"} and "19_ReLU" in {p.name for p in kb}
    assert [p.name for p in dlrm.PROBLEMS][:2] == ["01_EmbeddingBagSum", "02_WeightedMeanEmbeddingBag"]
    assert all(p.summary and p.shapes and p.stands_for and p.select for p in dlrm.PROBLEMS)


def test_precision_state_answers_after_torch_s_two_precision_apis_were_mixed():
    # torch.get_float32_matmul_precision raises once a per-backend fp32_precision was set; the harness records it
    import subprocess
    import sys

    code = (
        "import torch; torch.backends.cuda.matmul.fp32_precision = 'tf32'\n"
        "from headroom.verify.precision import precision_state\n"
        "st = precision_state(); print(st['float32_matmul_precision'], st['matmul_fp32_precision'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "mixed" and out[-1] == "tf32"


def test_stream_ordering_fails_only_when_every_call_of_the_trial_waited():
    # One long wait (the child descheduled inside the synchronise; an honest cuDNN convolution once waited
    # 278 us on the H200) is followed by a call that waited microseconds: ordered.
    once = cmp.Agg("stream_ordering")
    cmp.record_ordering("mixed_scales", [0.278, 0.004], once)
    assert once.check().passed and once.check().detail == "all work ordered on the caller's stream"
    # A side stream left running waits at every call: fails, with each wait in the detail.
    every = cmp.Agg("stream_ordering")
    cmp.record_ordering("mixed_scales", [0.278, 0.300, 0.251], every)
    check = every.check()
    assert not check.passed
    assert "278, 300, 251 us" in check.detail and "(3 call(s))" in check.detail
    # At the limit is ordered, just past it is not.
    edge = cmp.Agg("stream_ordering")
    cmp.record_ordering("t", [cmp.UNORDERED_MS], edge)
    assert edge.check().passed
    cmp.record_ordering("t", [cmp.UNORDERED_MS + 1e-6], edge)
    assert not edge.check().passed
