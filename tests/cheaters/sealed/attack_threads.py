"""Attack on fairness: the reference runs with the harness's thread count (--threads), the candidate
raises its own to every CPU it may use; on a machine with idle cores it buys a speedup that is not
the kernel's. The math is honest. Reports the CPUs it was allowed to HEADROOM_TEST_REPORT."""

import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        cpus = sorted(os.sched_getaffinity(0))
        torch.set_num_threads(max(len(cpus), os.cpu_count() or 1))
        path = os.environ.get("HEADROOM_TEST_REPORT")
        if path:
            with open(path, "w") as f:
                f.write(",".join(map(str, cpus)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x) * 1.0)
