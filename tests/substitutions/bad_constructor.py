"""A constructor that does not take LlamaRMSNorm's arguments (hidden_size, eps)."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x
