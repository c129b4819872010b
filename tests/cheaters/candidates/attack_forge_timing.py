"""Attack: walk the stack to the harness's connection and forge the timing reply.

Honest during memory and correctness trials; at the first timed call it finds
the current command and the pipe in its callers' frames (falling back to
``gc``), computes ONE output, sends a RunDone that names it for every timed
iteration (as if all had run, in a fraction of the time), and — as the
HEADROOM_ATTACK_EXIT variant — exits at once, or else carries on so the real
reply arrives later too.
"""

import gc
import multiprocessing.connection
import os
import sys

import torch
import torch.nn as nn

from headroom.verify import protocol as P
from headroom.verify import shared


def _find_run_and_conn():
    f = sys._getframe(1)
    cmd = conn = None
    while f is not None:
        for v in f.f_locals.values():
            if isinstance(v, P.Run) and cmd is None:
                cmd = v
            if isinstance(v, multiprocessing.connection.Connection) and conn is None:
                conn = v
        f = f.f_back
    if conn is None:
        conn = next((o for o in gc.get_objects() if isinstance(o, multiprocessing.connection.Connection)), None)
    return cmd, conn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.keep = []
        self.forged = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.nn.functional.gelu(self.linear(x))
        cmd, conn = _find_run_and_conn()
        if cmd is not None and conn is not None and not self.forged:
            self.forged = True
            self.keep.append(out)
            d = shared.describe(out, "addr")
            conn.send_bytes(
                P.encode(
                    P.RunDone(
                        seq=cmd.seq,
                        outputs=[[d] for _ in cmd.batches],
                        child_ms=[0.001] * len(cmd.batches),
                        violations=[],
                    )
                )
            )
            if os.environ.get("HEADROOM_ATTACK_EXIT"):
                os._exit(0)
        return out
