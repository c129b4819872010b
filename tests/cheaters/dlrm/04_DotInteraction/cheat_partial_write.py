"""Cheat (DLRM-Bench 04): computes 0.3% of the rows into an unwritten buffer, skips the rest."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        li, lj = torch.tril_indices(num_features, num_features, offset=-1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)

    def forward(self, dense, sparse):
        batch, d = dense.shape
        out = torch.empty(batch, d + self.li.numel(), dtype=dense.dtype, device=dense.device)
        rows = max(1, int(batch * 0.003))
        z = torch.cat([dense[:rows].unsqueeze(1), sparse[:rows]], dim=1)
        zz = torch.bmm(z, z.transpose(1, 2))
        out[:rows] = torch.cat([dense[:rows], zz[:, self.li, self.lj]], dim=1)
        return out
