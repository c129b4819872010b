"""KernelBench level-1 style: cross-entropy loss of (32768, 4096) logits (a scalar output).

HEADROOM_BENCH_SCALE=cpu gives a small CPU instance.
"""
import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE") == "cpu"
BATCH = 64 if _CPU else 32768
CLASSES = 100 if _CPU else 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(predictions, targets)


def get_inputs():
    return [torch.randn(BATCH, CLASSES), torch.randint(0, CLASSES, (BATCH,))]


def get_init_inputs():
    return []
