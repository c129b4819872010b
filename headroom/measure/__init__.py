"""Measuring A against B: interleaved rounds, one interval method, the rules that make a result conclusive.

Used by ``headroom verify`` (the harness's clock of a candidate against its reference), ``headroom
validate`` (a model step before and after a substitution) and the benchmarks. ``stats`` holds the
statistics (pure functions), ``rounds`` the interleaving and when to stop, ``timers`` the one registry
of how a block of steps is timed.
"""

from headroom.measure.rounds import RoundPolicy, Rounds, interleave_rounds, round_order
from headroom.measure.stats import Comparison, compare, log_noise, median_ci, summary
from headroom.measure.timers import TIMERS, default_timer, get_timer

__all__ = [
    "Comparison",
    "RoundPolicy",
    "Rounds",
    "TIMERS",
    "compare",
    "default_timer",
    "get_timer",
    "interleave_rounds",
    "log_noise",
    "median_ci",
    "round_order",
    "summary",
]
