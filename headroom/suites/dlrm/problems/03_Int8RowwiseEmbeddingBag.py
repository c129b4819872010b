"""DLRM-Bench 03: int8 row-wise quantized embedding bag (sum pooling).

A 4M x 128 int8 table with a float32 scale and bias per row (fbgemm's 8-bit
row-wise format, kept as three buffers here), bags of 0-40 ids (mean 20) for a
batch of 65536. The reference gathers the rows, dequantizes (q * scale + bias)
and sums each bag. Stands for the quantized embedding-bag kernels of inference
(``fbgemm::int_nbit_split_embedding*``, ``quantized::embedding_bag_byte*``).

Set HEADROOM_BENCH_SCALE=cpu for a small CPU-sized instance.
"""

import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE", "full") == "cpu"

ROWS = 1000 if _CPU else 4_000_000
DIM = 16 if _CPU else 128
BATCH = 32 if _CPU else 65536
MAX_LEN = 8 if _CPU else 40


class Model(nn.Module):
    qweight: torch.Tensor
    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(self, rows, dim):
        super().__init__()
        self.register_buffer("qweight", torch.randint(-127, 128, (rows, dim), dtype=torch.int8))
        self.register_buffer("scale", torch.rand(rows) * 0.02 + 0.004)
        self.register_buffer("bias", (torch.rand(rows) - 0.5) * 0.05)

    def forward(self, indices, offsets):
        rows = self.qweight[indices].float() * self.scale[indices].unsqueeze(1) + self.bias[indices].unsqueeze(1)
        batch = offsets.numel() - 1
        bag = torch.repeat_interleave(
            torch.arange(batch, device=indices.device), offsets[1:] - offsets[:-1], output_size=indices.numel()
        )
        out = torch.zeros(batch, rows.shape[1], dtype=rows.dtype, device=rows.device)
        return out.index_add_(0, bag, rows)


def get_inputs():
    lengths = torch.randint(0, MAX_LEN + 1, (BATCH,))
    offsets = torch.zeros(BATCH + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, 0)
    indices = torch.randint(0, ROWS, (int(offsets[-1]),))
    return [indices, offsets]


def get_init_inputs():
    return [ROWS, DIM]
