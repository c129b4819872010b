"""Leaves files in the machine's shared temporary directories, honest math otherwise.

Files in /tmp, /var/tmp and /dev/shm outlived the run: a later candidate (or the reference, or the
next run's harness) could find them, and memory held in /dev/shm was nobody's. The attack writes one
file (and a directory with a file) under each, named after ``HEADROOM_TEST_MARKER``.

Expected: the verdict of its honest math (``pass`` or ``inconclusive`` for noise), and nothing left
with the marker's name once ``verify`` returns: /dev/shm and /var/tmp are a tmpfs of its own mount
namespace, gone with it, and what its uid left in /tmp is removed when its sandbox closes.
"""

import os

import torch
import torch.nn as nn

MARKER = os.environ.get("HEADROOM_TEST_MARKER", "headroom-leftover")
for d in ("/tmp", "/var/tmp", "/dev/shm"):
    try:
        with open(os.path.join(d, MARKER), "wb") as f:
            f.write(b"x" * 4096)
        os.makedirs(os.path.join(d, MARKER + ".d"), exist_ok=True)
        with open(os.path.join(d, MARKER + ".d", "inner"), "wb") as f:
            f.write(b"y")
    except OSError:
        pass


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))
