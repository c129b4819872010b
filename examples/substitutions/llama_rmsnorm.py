"""Fused RMSNorm for LlamaRMSNorm: one Triton kernel per call instead of eight aten kernels.

transformers' LlamaRMSNorm runs `to(float32)`, `pow`, `mean`, `add`, `rsqrt`, `mul`,
`to(bfloat16)` and `mul` (weight): eight launches and seven round trips through memory.
This kernel reads a row once, reduces in float32, and writes the result once, rounding
exactly where transformers rounds (the normalised row to the input dtype, then times the
weight). The output has the input's dtype (as in the workloads, where weight and input
share it). On a CPU (no Triton) the same arithmetic runs in torch, so CPU tests exercise
extract -> verify -> validate; on a GPU the Triton kernel is required.
"""

import torch
import torch.nn as nn

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU machines: the torch path below
    triton = None

GPU_KERNELS = ("_rms_norm_fwd",)  # what the GPU path launches (checked in the variant trace)

if triton is not None:

    @triton.jit
    def _rms_norm_fwd(X, W, Y, stride_x, stride_y, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        var = tl.sum(x * x, axis=0) / N
        h = (x * (1.0 / tl.sqrt(var + eps))).to(Y.dtype.element_ty)  # hidden_states.to(input_dtype)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + row * stride_y + cols, (w * h.to(tl.float32)).to(Y.dtype.element_ty), mask=mask)


def rms_norm(x, weight, eps):
    if x.device.type == "cpu":
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return (weight * h.to(x.dtype)).to(x.dtype)
    if triton is None:
        raise RuntimeError("llama_rmsnorm: the GPU path needs Triton")
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    block = triton.next_power_of_2(n)
    _rms_norm_fwd[(x2.shape[0],)](
        x2, weight, y, x2.stride(0), y.stride(0), n, eps, BLOCK=block, num_warps=8 if block >= 2048 else 4
    )
    return y.view(x.shape)


class ModelNew(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)
