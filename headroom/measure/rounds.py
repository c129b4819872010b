"""Interleaved rounds: every arm measured once per round, in alternating order, until the answer is tight.

Round r measures the arms in the given order when r is even and reversed when r is odd (A B, B A,
...), so a trend in the machine's speed falls on both sides of a pair alike. After ``min_rounds``
the rounds stop as soon as the interval of the compared pair is at most ``target_width`` (hi/lo),
or at ``max_rounds``, or when the time budget is spent — whichever comes first — and ``stop`` says
which. Stopping on a tight interval is what makes a quick answer possible on a quiet machine and an
honest "too noisy" possible on a loaded one; what it costs (the interval's coverage is that of a
fixed R, a little optimistic under optional stopping) is why ``target_width`` is tighter than the
width that is called conclusive.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from headroom.measure.stats import MIN_ROUNDS, compare


@dataclass(frozen=True)
class RoundPolicy:
    min_rounds: int = MIN_ROUNDS
    max_rounds: int = 30
    target_width: float = 1.02  # stop once the pair's interval is this tight (hi / lo)
    budget_s: float | None = None  # wall seconds the rounds may take (None: no limit)


@dataclass
class Rounds:
    arms: list[str]
    values: dict[str, list[float]] = field(default_factory=dict)
    orders: list[list[str]] = field(default_factory=list)
    stop: str = ""  # tight | max_rounds | budget | stopped (the caller's on_round said so)
    seconds: float = 0.0


def round_order(arms: list[str], r: int) -> list[str]:
    """Arms as given in even rounds, reversed in odd ones (A B, B A, ...)."""
    return list(arms) if r % 2 == 0 else list(reversed(arms))


def interleave_rounds(
    arms: list[str],
    measure: Callable[[str, int], float],
    policy: RoundPolicy,
    pair: tuple[str, str] | None = None,
    on_round: Callable[[int, dict[str, float]], bool] | None = None,
    net: Callable[[str, float], float] | None = None,
) -> Rounds:
    """Run rounds of ``measure(arm, round)``; ``pair`` (default: the first two arms) decides when to stop.

    ``on_round(r, values_of_round)`` runs after each round; returning False stops the rounds
    (a check failed). ``net(arm, value)``: what the stopping rule compares (e.g. a phase less its
    calibrated overhead, which can change as the rounds go). Each arm's raw values are in round
    order in ``Rounds.values``.
    """
    a, b = pair or (arms[0], arms[1])
    out = Rounds(list(arms), {name: [] for name in arms})
    t0 = time.monotonic()
    r = 0
    while True:
        order = round_order(arms, r)
        this: dict[str, float] = {}
        for name in order:
            this[name] = measure(name, r)
        for name in arms:
            out.values[name].append(this[name])
        out.orders.append(order)
        r += 1
        if on_round is not None and on_round(r - 1, this) is False:
            out.stop = "stopped"
            break
        if r >= policy.min_rounds:
            f = net or (lambda _name, v: v)
            width = compare([f(a, v) for v in out.values[a]], [f(b, v) for v in out.values[b]]).width
            if width is not None and width <= policy.target_width:
                out.stop = "tight"
                break
        if r >= policy.max_rounds:
            out.stop = "max_rounds"
            break
        if policy.budget_s is not None and time.monotonic() - t0 >= policy.budget_s and r >= policy.min_rounds:
            out.stop = "budget"
            break
    out.seconds = time.monotonic() - t0
    return out
