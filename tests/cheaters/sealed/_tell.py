"""What the trial/timed attacks share: the honest math, and the cheaper answer they give while timed.

``coarse`` rounds the answer to fewer mantissa bits (what a kernel computing or storing in a narrower
format returns), about 10x the reference's own error on each device, so that it is a cheat there:

- CPU (float32 reference, error ~1e-7): 10 bits (half precision). Relative L2 error ~2.1e-4, 10x the
  float32 trial gate (2e-5); every element within 2^-11 of the truth, relative, inside a sampled
  per-element check at 4x the trial's per-element gate.
- CUDA, where the reference runs with TF32 (10 mantissa bits in its matmuls; relative L2 error ~3.1e-4
  on the H200, trial gate 4x that): 10 bits is TF32's own precision, an honest answer there (measured:
  these attacks `pass` on the H200 with it). 6 bits: relative L2 error ~3.3e-3, 2.7x the trial gate
  and the timed samples' bound; per element within 2^-7 (~6e-3 x (|t| + rms)), inside the sampled
  per-element check (4x a trial gate of 4e-3 to 7e-3)."""

import torch
import torch.nn as nn


def bits_for(t: torch.Tensor) -> int:
    return 6 if t.is_cuda and torch.get_float32_matmul_precision() != "highest" else 10


def coarse(t: torch.Tensor, bits: int | None = None) -> torch.Tensor:
    drop = 23 - (bits if bits is not None else bits_for(t))
    bits = t.contiguous().view(torch.int32)
    return ((bits + (1 << (drop - 1))) & ~((1 << drop) - 1)).view(torch.float32)


class Base(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def honest(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))

    def timed(self, x: torch.Tensor) -> bool:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.honest(x)
        return coarse(out) if self.timed(x) else out
