"""KernelBench level-1 style: Conv2d(64 -> 128, 3x3) on (32, 64, 128, 128) (cuDNN; TF32 applies).

HEADROOM_BENCH_SCALE=cpu gives a small CPU instance.
"""
import os

import torch
import torch.nn as nn

_CPU = os.environ.get("HEADROOM_BENCH_SCALE") == "cpu"
BATCH = 2 if _CPU else 32
IN_CHANNELS = 4 if _CPU else 64
OUT_CHANNELS = 8 if _CPU else 128
KERNEL = 3
SIZE = 16 if _CPU else 128


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, (kernel_size, kernel_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2d(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL]
