"""Honest: diag(A) @ B is a row scaling; no N x N diagonal matrix, no GEMM (a real, large speedup)."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return A.unsqueeze(1) * B
