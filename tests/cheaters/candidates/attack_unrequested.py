"""Attack: slips an extra, well-formed message into the pipe during its first correctness trial."""

import gc
import multiprocessing.connection
import sys

import torch
import torch.nn as nn

from headroom.verify import protocol as P


def _in_trial() -> bool:
    """The command its caller's frame serves is a correctness trial."""
    f = sys._getframe(1)
    while f is not None:
        cmd = f.f_locals.get("cmd")
        if cmd is not None:
            return isinstance(cmd, P.Trial)
        f = f.f_back
    return False


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.sent = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _in_trial() and not self.sent:
            self.sent = True
            conn = next(o for o in gc.get_objects() if isinstance(o, multiprocessing.connection.Connection))
            conn.send_bytes(P.encode(P.Done(seq=12345, violations=[])))
        return torch.nn.functional.gelu(self.linear(x))
