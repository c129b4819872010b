"""DLRM-Bench 12: target-attention pooling over a behaviour sequence (DIN-style).

For a candidate-item query (16384, 128) and a padded user history
(16384, 100, 128) with 1-100 valid items per user: scores = history . query /
sqrt(128), masked past each user's length, softmax, and the weighted sum of
the history: (16384, 128). Stands for a target-attention pooling module's
bmm, softmax and mask kernels.

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import math
import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

BATCH = 16 if _CPU else 16384
SEQ = 10 if _CPU else 100
DIM = 16 if _CPU else 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, query, history, lengths):
        scores = torch.bmm(history, query.unsqueeze(2)).squeeze(2) / math.sqrt(query.shape[1])
        mask = torch.arange(history.shape[1], device=history.device).unsqueeze(0) < lengths.unsqueeze(1)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=1)
        return torch.bmm(weights.unsqueeze(1), history).squeeze(1)


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, SEQ, DIM), torch.randint(1, SEQ + 1, (BATCH,))]


def get_init_inputs():
    return []
