"""A 1024 x 1024 fp32 matrix product (KernelBench format): the CPU precision check of `headroom verify`."""

import torch
import torch.nn as nn

N = 1024


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []
