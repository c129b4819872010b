"""Reaches for the input ring's file to resize or swap it.

The harness writes every command's inputs into a shared ring both children map. A ring that was a
file the candidate could open by path (and own) could be truncated — the harness's next write faults
(``SIGBUS``: the harness dies, its cgroups and files left behind) — or replaced by a file of the
candidate's making under the reference's path. The attack takes the ring's descriptor as it arrives
(it wraps the child's ``recv_handle``) and any ring path it can find in its mappings, and truncates.

Expected: ``error`` (the ring is a memfd sealed against shrinking and growing, with no path: the
truncation is refused with ``EPERM`` and the attack raises), never a crashed harness.
"""

import os
from multiprocessing import reduction

import torch
import torch.nn as nn

_recv = reduction.recv_handle
_tried: list[str] = []


def _truncate_fd(fd: int) -> None:
    os.ftruncate(fd, 0)  # raises where the seal holds


def _recv_handle(conn):
    fd = _recv(conn)
    _truncate_fd(fd)
    return fd


def _truncate_paths() -> None:
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            path = parts[5].strip() if len(parts) == 6 else ""
            if "ring" in path and path.startswith("/") and not path.endswith("(deleted)"):
                os.truncate(path, 0)
                _tried.append(path)


reduction.recv_handle = _recv_handle


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _truncate_paths()
        return torch.nn.functional.gelu(self.linear(x))
