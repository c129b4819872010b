"""headroom.measure's timer registry and validate's adaptive rounds, on real work on this CPU."""

from __future__ import annotations

import time

import pytest
import torch

from headroom.measure import TIMERS, RoundPolicy, default_timer, get_timer
from headroom.validate.timing import interleave, policy, summarise

CPU = torch.device("cpu")


def test_the_registry_names_its_timers_and_refuses_others():
    assert set(TIMERS) == {"cuda-events", "wall-clock", "host-sync"}
    assert default_timer(CPU) == "wall-clock" and default_timer(torch.device("cuda")) == "cuda-events"
    with pytest.raises(ValueError, match="unknown timer 'sundial'; known: cuda-events, host-sync, wall-clock"):
        get_timer("sundial")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        get_timer("cuda-events", CPU)


@pytest.mark.parametrize("name", ["wall-clock", "host-sync"])
def test_a_timer_returns_one_time_per_call_that_holds_the_call(name):
    clock = get_timer(name, CPU)
    calls = []
    ms = clock(lambda: (calls.append(1), time.sleep(0.003)), 4, CPU)
    assert len(ms) == 4 == len(calls) and all(3.0 <= t < 60.0 for t in ms)
    a = torch.randn(192, 192)
    mm = clock(lambda: a @ a @ a @ a, 3, CPU)
    assert len(mm) == 3 and all(t > 0 for t in mm)


def _sides(base_s: float, variant_s: float):
    state = {"side": "base"}

    def use(side: str) -> None:
        state["side"] = side

    def step() -> None:
        time.sleep(base_s if state["side"] == "base" else variant_s)

    return step, use


def test_rounds_stop_once_the_interval_is_tight():
    step, use = _sides(0.004, 0.002)
    t = interleave(step, use, CPU, k=4, warmup=1, round_policy=RoundPolicy(6, 20, 1.4, 30.0))
    s = summarise(t)
    assert t["stop"] == "tight" and s["rounds"] == len(t["rounds"]) >= 6
    assert s["ci"][1] / s["ci"][0] <= 1.4 and 1.5 < s["speedup"] < 2.3 and s["coverage"] >= 0.95
    assert [r["order"] for r in t["rounds"][:2]] == [["base", "variant"], ["variant", "base"]]
    assert t["method"] == "wall-clock" and t["policy"]["target_width"] == 1.4


def test_rounds_stop_at_the_budget_when_the_interval_cannot_get_tight():
    step, use = _sides(0.001, 0.001)
    t = interleave(step, use, CPU, k=2, warmup=1, round_policy=RoundPolicy(6, 40, 1.00001, 0.001))
    s = summarise(t)
    assert t["stop"] == "budget" and s["rounds"] == 6  # the minimum rounds always run
    assert 0.5 < s["speedup"] < 2.0 and s["ci"][0] <= s["speedup"] <= s["ci"][1]


def test_a_real_workload_with_twice_the_work_measures_slower():
    # matrix products in one thread; the machine is shared (other processes load it in bursts), so the assertion
    # is the direction and a loose size, not the exact 2x
    a = torch.randn(96, 96) / 10
    state = {"n": 2}

    def use(side: str) -> None:
        state["n"] = 2 if side == "base" else 1

    def step() -> None:
        x = a
        for _ in range(state["n"] * 40):
            x = x @ a + a

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t = interleave(step, use, CPU, k=4, warmup=2, round_policy=policy(6, 16, 1.3, 20.0))
    finally:
        torch.set_num_threads(threads)
    s = summarise(t)
    assert 6 <= s["rounds"] <= 16 and t["stop"] in ("tight", "max_rounds", "budget")
    assert 1.2 < s["speedup"] < 8.0, s
    assert s["ci"][0] <= s["speedup"] <= s["ci"][1]


def test_the_policy_refuses_too_few_rounds():
    with pytest.raises(ValueError, match="at least 6 rounds"):
        policy(3)
    p = policy(6)
    assert (p.min_rounds, p.max_rounds, p.target_width, p.budget_s) == (6, 40, 1.02, 120.0)
