"""Honest DLRM-Bench 09 candidate: embedding_bag over the identity index is a segment sum without atomics."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, values, offsets):
        ident = torch.arange(values.shape[0], device=values.device)
        return F.embedding_bag(ident, values, offsets, mode="sum", include_last_offset=True)
