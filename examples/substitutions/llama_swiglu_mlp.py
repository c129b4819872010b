"""LlamaMLP with the SwiGLU gate fused: silu(gate) * up in one Triton kernel.

transformers' LlamaMLP runs `down_proj(act_fn(gate_proj(x)) * up_proj(x))`: the SiLU and
the product are two elementwise kernels over the (tokens x 11008) intermediate, each a full
read and write. This candidate keeps the three GEMMs (same nn.Linear modules, same parameter
names) and computes silu(gate) * up in one pass, rounding the activation to the activation
dtype before the product as transformers does. Parameters follow the activations' dtype
(the workload holds them in it; KernelBench builds ModelNew in float32). On a CPU the same
arithmetic runs in torch; on a GPU the Triton kernel is required.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

GPU_KERNELS = ("_swiglu_fwd",)

if triton is not None:

    @triton.jit
    def _swiglu_fwd(G, U, Y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(U + offs, mask=mask, other=0.0).to(tl.float32)
        a = (g * tl.sigmoid(g)).to(Y.dtype.element_ty).to(tl.float32)  # act_fn(gate) in the activation dtype
        tl.store(Y + offs, (a * u).to(Y.dtype.element_ty), mask=mask)


def swiglu(gate, up):
    if gate.device.type == "cpu":
        return F.silu(gate) * up
    if triton is None:
        raise RuntimeError("llama_swiglu_mlp: the GPU path needs Triton")
    gate = gate if gate.is_contiguous() else gate.contiguous()
    up = up if up.is_contiguous() else up.contiguous()
    y = torch.empty_like(gate)
    n = gate.numel()
    block = 2048
    _swiglu_fwd[(triton.cdiv(n, block),)](gate, up, y, n, BLOCK=block, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self, config):
        super().__init__()
        if config.hidden_act != "silu":
            raise ValueError(f"llama_swiglu_mlp fuses SiLU; this config uses {config.hidden_act}")
        self.config = config
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=config.mlp_bias)
        self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=config.mlp_bias)

    def forward(self, x):
        if self.gate_proj.weight.dtype != x.dtype and not torch.is_autocast_enabled(x.device.type):
            self.to(x.dtype)  # once: KernelBench builds ModelNew in float32, the workload holds bf16
        return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))
