"""Attack: look for seeds, trial plans and future inputs in its own process to precompute outputs.

At construction it walks every object ``gc`` knows (and every frame) for
anything that looks like a seed or a trial/phase description, and tries to read
its ancestors' memory through /proc. It writes what it found to
HEADROOM_TEST_REPORT, uses a precomputed answer if it has one, and otherwise
returns zeros (so any leak would show as a pass).
"""

import gc
import json
import os
import sys

import torch
import torch.nn as nn

SUSPECT = ("seed", "trial", "secret", "timing", "spec", "plan")


def _snoop() -> dict:
    found = []
    for o in gc.get_objects():
        try:
            if isinstance(o, dict):
                keys = [k for k in o if isinstance(k, str) and any(s in k.lower() for s in SUSPECT)]
                for k in keys:
                    v = o[k]
                    if isinstance(v, int) and not isinstance(v, bool) and v > 2**32:
                        found.append(f"dict[{k}]={v}")
            elif type(o).__name__ in ("TrialSpec", "Seeds", "ReferenceRun"):
                found.append(type(o).__name__)
        except Exception:
            continue
    f = sys._getframe()
    while f is not None:
        for k, v in f.f_locals.items():
            if any(s in k.lower() for s in SUSPECT) and isinstance(v, int) and v > 2**32:
                found.append(f"frame {f.f_code.co_name}.{k}={v}")
        f = f.f_back
    readable = []
    pid = os.getpid()
    for _ in range(4):
        try:
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            break
        if pid <= 1:
            break
        try:
            with open(f"/proc/{pid}/mem", "rb"):
                readable.append(pid)
        except OSError:
            pass
    return {"found": found, "ancestors_readable": readable}


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        report = _snoop()
        path = os.environ.get("HEADROOM_TEST_REPORT")
        if path:
            with open(path, "w") as f:
                json.dump(report, f)
        self.precomputed = None  # nothing found to precompute from

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.precomputed is not None:
            return self.precomputed
        return torch.zeros(x.shape[0], self.linear.out_features)
