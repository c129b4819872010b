"""Probe (honest math): at every call, appends to HEADROOM_TEST_REPORT the command its caller serves
(read from the child's own frames: ``Memory``, ``Launches``, ``Trial``, ``Run``), whether a fresh
buffer of the output's size reads as NaN, and a hash of every piece of torch's global state it can
read (``attack_trial_snapshot.snapshot``)."""

import os
import sys

import torch

sys.path.insert(0, os.environ.get("HEADROOM_SEALED_DIR", os.path.dirname(os.path.abspath(__file__))))
from _tell import Base  # noqa: E402
from attack_trial_snapshot import snapshot  # noqa: E402


def _command() -> str:
    f = sys._getframe(2)
    while f is not None:
        cmd = f.f_locals.get("cmd")
        if cmd is not None and type(cmd).__module__.endswith("protocol"):
            return type(cmd).__name__
        f = f.f_back
    return "?"


class ModelNew(Base):
    def timed(self, x: torch.Tensor) -> bool:
        fresh = torch.empty(x.shape[0], self.linear.out_features, dtype=x.dtype, device=x.device)
        nan = float(fresh.isnan().float().mean())
        path = os.environ.get("HEADROOM_TEST_REPORT")
        if path:
            with open(path, "a") as f:
                f.write(f"{_command()} {snapshot()} {nan:.3f}\n")
        return False
