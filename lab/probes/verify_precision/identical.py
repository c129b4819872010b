"""The reference itself as the candidate: verify must say 1.00x, inside its interval."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
