"""DLRM-Bench 07: factorization-machine (second-order) interaction.

For feature embeddings v (65536, 27, 128): 0.5 * ((sum_f v_f)^2 - sum_f v_f^2),
the pairwise-interaction term of FM / DeepFM (kept per dimension, i.e. NFM's
bi-interaction pooling; summing it over the last dim gives DeepFM's scalar).
Stands for the FM interaction module's element-wise and reduction kernels.

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

BATCH = 32 if _CPU else 65536
NUM_FEATURES = 27
DIM = 16 if _CPU else 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, v):
        s = v.sum(dim=1)
        return 0.5 * (s * s - (v * v).sum(dim=1))


def get_inputs():
    return [torch.randn(BATCH, NUM_FEATURES, DIM)]


def get_init_inputs():
    return []
