"""Wrong: forgets to normalise (weight * x), so the model's outputs change."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        return self.weight * hidden_states
