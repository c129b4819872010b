"""Attack on the trial/timed distinction that no global state can hide: the command itself.

The child's own loop calls ``forward``; its frame holds the command being served. Honest when that
is a ``Trial``; in a timed ``Run`` the answer rounded to fewer mantissa bits (``_tell.coarse``), which a
sampled per-element check at 4x the trial's per-element gate passes. Only a timed check as strict
as a trial's relative L2 gate (on the samples) catches it."""

import os
import sys

import torch

sys.path.insert(0, os.environ.get("HEADROOM_SEALED_DIR", os.path.dirname(os.path.abspath(__file__))))
from _tell import Base  # noqa: E402


class ModelNew(Base):
    def timed(self, x: torch.Tensor) -> bool:
        f = sys._getframe(1)
        while f is not None:
            cmd = f.f_locals.get("cmd")
            if cmd is not None and type(cmd).__name__ in ("Trial", "Run"):
                return type(cmd).__name__ == "Run"
            f = f.f_back
        return False
