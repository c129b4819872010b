"""Attack on the trial/timed distinction: torch's global flags.

A harness that poisons uninitialised memory only in its trials (``torch.use_deterministic_algorithms``
with ``torch.utils.deterministic.fill_uninitialized_memory``) tells the candidate which calls are
checked in full. Honest while deterministic algorithms are on (``fill_uninitialized_memory`` is
True by default: it only acts under them); otherwise the answer rounded to fewer mantissa bits
(``_tell.coarse``: 10 on a CPU, 6 on CUDA under TF32), which a sampled per-element check passes and a
trial's relative L2 gate fails."""

import os
import sys

import torch

sys.path.insert(0, os.environ.get("HEADROOM_SEALED_DIR", os.path.dirname(os.path.abspath(__file__))))
from _tell import Base  # noqa: E402


class ModelNew(Base):
    def timed(self, x: torch.Tensor) -> bool:
        return not torch.are_deterministic_algorithms_enabled()
