"""Attack: plants a .pyc for the problem next to its source (its header carries the source's own
mtime and size, so the import system takes it as current) whose Model computes the same output
four times: the reference child, started after the candidate's trials, imports it and is four
times slower, in calibration and in every round. The candidate itself is honest. Tries the file
it imported and the problem's published path (HEADROOM_TEST_PROBLEM: an attacker who knows the
layout); reports each attempt to HEADROOM_TEST_REPORT."""

import importlib.util
import os
import sys
from importlib import _bootstrap_external as bx

import torch
import torch.nn as nn

_SLOW = """
import torch
import torch.nn as nn
BATCH = 256
IN_FEATURES = 128
OUT_FEATURES = 96


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        for _ in range(3):
            self.linear(x)
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
"""

_targets = [
    next(m.__file__ for n, m in list(sys.modules.items()) if n.startswith("_headroom_problem_")),
    os.environ.get("HEADROOM_TEST_PROBLEM"),
]
_log = []
for _problem in dict.fromkeys(t for t in _targets if t):
    try:
        _st = os.stat(_problem)
        _pyc = importlib.util.cache_from_source(_problem)
        os.makedirs(os.path.dirname(_pyc), exist_ok=True)
        with open(_pyc, "wb") as f:
            f.write(bx._code_to_timestamp_pyc(compile(_SLOW, _problem, "exec"), int(_st.st_mtime), _st.st_size))
        _log.append(f"planted {_pyc}")
    except OSError as e:
        _log.append(f"refused {_problem}: {type(e).__name__}")
if os.environ.get("HEADROOM_TEST_REPORT"):
    with open(os.environ["HEADROOM_TEST_REPORT"], "a") as f:
        f.write("\n".join(_log) + "\n")


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))
