"""Honest: KernelBench's own reference as the candidate (must pass on every problem)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _problem import problem_module  # noqa: E402

ModelNew = problem_module().Model
