"""Describes its timed outputs with strides that span far more memory than they hold.

The harness reads an output where the child says it is; a description whose strides span tens of
gigabytes for a few thousand elements made it copy the whole span (``MemoryError``: an error, no
verdict on the candidate). The attack computes honestly and, in the replies of timed phases only
(its trials are described truthfully), multiplies each output's outer stride by 2^24.

Expected: ``fail``: a description whose span exceeds a few times the expected size is refused before
anything is read (``shared.check_structure``), as an output unreadable as described.
"""

import sys

import torch
import torch.nn as nn

P = sys.modules["headroom.verify.protocol"]
sys.modules["headroom.verify.integrity"].violations = lambda snap: []  # in-child evidence: silenced
_encode = P.encode


def _widen(o):
    if isinstance(o, P.AddrTensor) and len(o.stride) > 1:
        return P.AddrTensor(addr=o.addr, dtype=o.dtype, shape=o.shape, stride=(o.stride[0] << 24, *o.stride[1:]))
    return o


def _encode_reply(msg):
    if isinstance(msg, P.RunDone) and any(msg.outputs):
        msg = P.RunDone(
            seq=msg.seq,
            outputs=[[_widen(o) for o in row] for row in msg.outputs],
            child_ms=msg.child_ms,
            violations=msg.violations,
            segments=msg.segments,
        )
    return _encode(msg)


P.encode = _encode_reply


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))
