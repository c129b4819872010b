"""Changes torch's global state between its calls: a finalizer on each output adds a warning filter
when the child frees the output (after the harness has read it, before the next call), as a harness
that set up trials and timed phases differently would change the state. The child's check of the
state at every call stops it with the reason."""

import itertools
import warnings
import weakref

import torch
import torch.nn as nn

_n = itertools.count()


def _change() -> None:
    warnings.filterwarnings("ignore", message=f"headroom-test-{next(_n)}")


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.nn.functional.gelu(self.linear(x))
        weakref.finalize(out, _change)
        return out
