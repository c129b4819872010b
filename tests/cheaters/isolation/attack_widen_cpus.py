"""Tries to run on the reference's cores: at every forward it widens its own CPU affinity to every CPU
of the machine (``sched_setaffinity``), then records the CPUs the kernel lets it use.

On a CPU the two timed children run on disjoint halves of the harness's CPUs (each child's cgroup
``cpuset``, exchanged between them every round), so what it leaves behind in the kernel lands on its
own cores. Expected: its honest verdict (``pass``, or ``inconclusive`` for noise) with every CPU set it
saw one of the two halves, never both; ``HEADROOM_TEST_REPORT`` gets the sets as JSON.
"""

import json
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.seen: set[tuple[int, ...]] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            os.sched_setaffinity(0, range(os.cpu_count() or 1))
        except OSError:
            pass
        got = tuple(sorted(os.sched_getaffinity(0)))
        if got not in self.seen:
            self.seen.add(got)
            path = os.environ.get("HEADROOM_TEST_REPORT")
            if path:
                with open(path, "w") as f:
                    json.dump(sorted(self.seen), f)
        return torch.nn.functional.gelu(self.linear(x))
