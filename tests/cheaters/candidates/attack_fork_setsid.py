"""Attack: forks a grandchild that calls setsid() (its own session), keeps the inherited stdout and loads
the CPU forever, writing its pid to HEADROOM_TEST_PIDFILE. The candidate itself is honest."""

import os
import time

import torch
import torch.nn as nn

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the grandchild: re-parented when the middle process exits
        path = os.environ.get("HEADROOM_TEST_PIDFILE")
        if path:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        end = time.time() + 600
        while time.time() < end:
            pass
        os._exit(0)
    os._exit(0)
time.sleep(0.2)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))
