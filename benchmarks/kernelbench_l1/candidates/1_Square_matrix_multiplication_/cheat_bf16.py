"""Cheat: precision downgrade: a bfloat16 GEMM (about 8x the rounding error of the TF32 baseline)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.mm(A.bfloat16(), B.bfloat16()).float()
