"""A slower RMSNorm for LlamaRMSNorm: the row reduced in float64 by eager torch (honest, and slower).

It reads the bf16 row as float64 (four times the bytes of the input), normalises, rounds to the input
dtype and multiplies by the weight, as transformers does: more accurate than the original and about
twice as slow. A candidate whose speedup is below 1: verify must say so conclusively and `project`
must project a slowdown.
"""

import torch

GPU_KERNELS = ()


class ModelNew(torch.nn.Module):
    def __init__(self, hidden_size=4096, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        h = hidden_states.to(torch.float64)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (self.weight * h.to(hidden_states.dtype)).to(hidden_states.dtype)
