"""Honest DLRM-Bench 08 candidate: one index_copy into the flattened padded tensor."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, max_len):
        super().__init__()
        self.max_len = max_len

    def forward(self, values, offsets):
        batch = offsets.numel() - 1
        total, dim = values.shape
        lengths = offsets[1:] - offsets[:-1]
        row_base = torch.arange(batch, device=values.device) * self.max_len - offsets[:-1]
        dest = torch.arange(total, device=values.device) + torch.repeat_interleave(row_base, lengths, output_size=total)
        out = torch.zeros(batch * self.max_len, dim, dtype=values.dtype, device=values.device)
        out.index_copy_(0, dest, values)
        return out.view(batch, self.max_len, dim)
