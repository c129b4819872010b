"""Attack on the trial/timed distinction: any global state at all, hashed.

The harness's order is public: the memory measurement's two forwards first, then the trials. The
candidate hashes every piece of torch's global state it can read (``snapshot``) at its first two
calls; a later call whose state differs from theirs is taken for a trial (honest), one whose state
matches for a timed phase (the answer rounded to fewer mantissa bits, ``_tell.coarse``). Where trials
and timed phases run under the same state, every call matches, and the trials fail."""

import hashlib
import os
import sys

import torch

sys.path.insert(0, os.environ.get("HEADROOM_SEALED_DIR", os.path.dirname(os.path.abspath(__file__))))
from _tell import Base  # noqa: E402


def snapshot() -> str:
    import torch.utils.deterministic as det

    parts = [
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        det.fill_uninitialized_memory,
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.get_default_dtype(),
        torch.get_float32_matmul_precision(),
        torch.get_num_threads(),
        torch.is_autocast_enabled("cpu"),
        torch.backends.cudnn.enabled,
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        torch.backends.mkldnn.enabled,
        sorted((k, v) for k, v in os.environ.items()),
    ]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


class ModelNew(Base):
    def __init__(self, in_features: int, out_features: int):
        super().__init__(in_features, out_features)
        self.seen: list[str] = []

    def timed(self, x: torch.Tensor) -> bool:
        h = snapshot()
        self.seen.append(h)
        if len(self.seen) <= 2:  # the memory measurement: a call like a timed one
            return False
        return h in self.seen[:2]
