"""Tanh-approximate GELU for GPT-2's NewGELUActivation: one Triton kernel instead of eight.

transformers' NewGELUActivation writes `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 *
x^3)))` as eight elementwise aten kernels (pow, mul, add, mul, tanh, add, mul, mul), each a
full pass over the (tokens x 6400) activation. This kernel computes the same function in
float32 in one pass, using 0.5 * (1 + tanh(z)) = sigmoid(2z), and rounds once to the input
dtype (transformers rounds after every op, so this is closer to the exact value). On a CPU
the same formula runs in torch; on a GPU the Triton kernel is required.
"""

import math

import torch
import torch.nn as nn

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

GPU_KERNELS = ("_gelu_tanh_fwd",)
_K = math.sqrt(2.0 / math.pi)

if triton is not None:

    @triton.jit
    def _gelu_tanh_fwd(X, Y, n, K: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        z = K * (x + 0.044715 * x * x * x)
        tl.store(Y + offs, (x * tl.sigmoid(2.0 * z)).to(Y.dtype.element_ty), mask=mask)


def gelu_tanh(x):
    if x.device.type == "cpu":
        xf = x.to(torch.float32)
        return (xf * torch.sigmoid(2.0 * _K * (xf + 0.044715 * xf * xf * xf))).to(x.dtype)
    if triton is None:
        raise RuntimeError("gpt2_gelu_tanh: the GPU path needs Triton")
    x = x if x.is_contiguous() else x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    block = 2048
    _gelu_tanh_fwd[(triton.cdiv(n, block),)](x, y, n, K=_K, BLOCK=block, num_warps=8)
    return y


class ModelNew(nn.Module):
    def forward(self, input):
        return gelu_tanh(input)
