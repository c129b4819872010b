"""Attack: does 3x the work, and rewrites the numbers of every message any pipe in its process sends.

Protocol-agnostic: it patches the connection's low-level write and scales every
msgpack float64 by 1/10 and every 32/64-bit unsigned integer by 1/2 on the way
out (times, sizes, addresses), hoping some of them are the ones that decide.
"""

import multiprocessing.connection
import struct

import torch
import torch.nn as nn


def _rewrite(buf: bytes) -> bytes:
    b = bytearray(buf)
    i = 0
    while i < len(b):
        if b[i] == 0xCB and i + 9 <= len(b):
            (v,) = struct.unpack(">d", b[i + 1 : i + 9])
            b[i + 1 : i + 9] = struct.pack(">d", v / 10)
            i += 9
        elif b[i] == 0xCF and i + 9 <= len(b):
            (v,) = struct.unpack(">Q", b[i + 1 : i + 9])
            b[i + 1 : i + 9] = struct.pack(">Q", v // 2)
            i += 9
        elif b[i] == 0xCE and i + 5 <= len(b):
            (v,) = struct.unpack(">I", b[i + 1 : i + 5])
            b[i + 1 : i + 5] = struct.pack(">I", v // 2)
            i += 5
        else:
            i += 1
    return bytes(b)


_orig = multiprocessing.connection.Connection._send_bytes


def _send_bytes(self, buf):
    return _orig(self, _rewrite(bytes(buf)))


multiprocessing.connection.Connection._send_bytes = _send_bytes


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(2):
            torch.nn.functional.gelu(self.linear(x))
        return torch.nn.functional.gelu(self.linear(x))
