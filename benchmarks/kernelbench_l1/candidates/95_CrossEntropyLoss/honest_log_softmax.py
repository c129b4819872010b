"""Honest: -mean(log_softmax(x)[target])."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        logp = torch.log_softmax(predictions, dim=1)
        return -logp.gather(1, targets.unsqueeze(1)).mean()
