"""Honest DLRM-Bench 05 candidate: the pairs are unique, so no accumulate (no sort) is needed.

The gradient is scattered to both (i, j) and (j, i) with one plain index_copy
into the flattened (27 x 27) matrix, which is then symmetric: a single bmm
replaces the sort-based ``index_put_(accumulate=True)``, the transpose and
the second bmm.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    both: torch.Tensor

    def __init__(self, num_features):
        super().__init__()
        li, lj = torch.tril_indices(num_features, num_features, offset=-1)
        self.register_buffer("both", torch.cat([li * num_features + lj, lj * num_features + li]))
        self.f = num_features

    def forward(self, z, grad_inter):
        batch, f, _ = z.shape
        g = torch.zeros(batch, f * f, dtype=z.dtype, device=z.device)
        g.index_copy_(1, self.both, torch.cat([grad_inter, grad_inter], dim=1))
        return torch.bmm(g.view(batch, f, f), z)
