"""Honest DLRM-Bench 03 candidate: dequantize in place, pool with embedding_bag (no atomics).

The table stays int8 (no dequantized copy: same memory as the reference); the
gathered rows are dequantized in place and summed per bag by ``embedding_bag``
over the identity index, instead of ``index_add_``'s atomics.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    qweight: torch.Tensor
    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(self, rows, dim):
        super().__init__()
        self.register_buffer("qweight", torch.randint(-127, 128, (rows, dim), dtype=torch.int8))
        self.register_buffer("scale", torch.rand(rows) * 0.02 + 0.004)
        self.register_buffer("bias", (torch.rand(rows) - 0.5) * 0.05)

    def forward(self, indices, offsets):
        rows = self.qweight.index_select(0, indices).float()
        rows.mul_(self.scale[indices].unsqueeze(1)).add_(self.bias[indices].unsqueeze(1))
        ident = torch.arange(indices.numel(), device=indices.device)
        return F.embedding_bag(ident, rows, offsets, mode="sum", include_last_offset=True)
