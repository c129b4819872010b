"""Measuring A against B: interleaved rounds, one interval method, the rules that make a result conclusive.

Used by ``headroom verify`` (the harness's clock of a candidate against its reference), ``headroom
validate`` (a model step before and after a substitution) and the benchmarks. ``stats`` holds the
statistics (pure functions), ``rounds`` the interleaving and when to stop.
"""

from headroom.measure.rounds import RoundPolicy, Rounds, interleave_rounds, round_order
from headroom.measure.stats import Comparison, compare, median_ci, summary

__all__ = ["Comparison", "RoundPolicy", "Rounds", "compare", "interleave_rounds", "median_ci", "round_order",
           "summary"]
