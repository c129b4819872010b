"""Honest DLRM-Bench 02 candidate: normalise the weights first, then pool once.

sum(w_i e_i) / sum(w_i) == sum((w_i / W) e_i): dividing the (n,) weights instead
of the (batch, 128) output saves a pass over the output.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, rows, dim):
        super().__init__()
        self.table = nn.EmbeddingBag(rows, dim, mode="sum", include_last_offset=True)

    def forward(self, indices, offsets, weights):
        batch = offsets.numel() - 1
        bag = torch.repeat_interleave(
            torch.arange(batch, device=indices.device), offsets[1:] - offsets[:-1], output_size=indices.numel()
        )
        wsum = torch.zeros(batch, dtype=weights.dtype, device=weights.device).index_add_(0, bag, weights)
        w = weights / wsum.clamp_min(1e-30)[bag]
        return F.embedding_bag(
            indices, self.table.weight, offsets, mode="sum", per_sample_weights=w, include_last_offset=True
        )
