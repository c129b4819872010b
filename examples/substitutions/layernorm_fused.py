"""Fused LayerNorm for `torch.nn.LayerNorm` (inference): one Triton kernel per call.

PyTorch's `native_layer_norm` already is one kernel; this one reads a row once in float32, writes the
normalised, scaled and shifted row once, in the input's dtype (as `native_layer_norm` does for fp16
and bf16 inputs). What it saves is small and the case is the point: a kernel that is only somewhat
faster, in a model (bert-base, fp16) where PyTorch's is already fused. On a CPU (no Triton) the same
arithmetic runs in torch.
"""

import torch
import torch.nn as nn

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU machines: the torch path below
    triton = None

GPU_KERNELS = ("_layer_norm_fwd",)

if triton is not None:

    @triton.jit
    def _layer_norm_fwd(X, W, B, Y, stride_x, stride_y, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / N
        d = tl.where(mask, x - mean, 0.0)
        var = tl.sum(d * d, axis=0) / N
        w = tl.load(W + cols, mask=mask, other=1.0).to(tl.float32)
        b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
        y = d * (1.0 / tl.sqrt(var + eps)) * w + b
        tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        n = normalized_shape if isinstance(normalized_shape, int) else int(tuple(normalized_shape)[-1])
        self.normalized_shape = (n,)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(n, device=device, dtype=dtype))

    def forward(self, x):
        n = self.normalized_shape[0]
        if x.device.type == "cpu" or triton is None:
            if x.device.type != "cpu":
                raise RuntimeError("layernorm_fused: the GPU path needs Triton")
            return torch.nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        x2 = x.reshape(-1, n)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(n)
        _layer_norm_fwd[(x2.shape[0],)](
            x2,
            self.weight,
            self.bias,
            y,
            x2.stride(0),
            y.stride(0),
            n,
            self.eps,
            BLOCK=block,
            num_warps=4 if block <= 1024 else 8,
        )
        return y.view(x.shape)
