"""What the trial/timed attacks share: the honest math, and the cheaper answer they give while timed.

``coarse`` rounds the answer to 10 mantissa bits (what a kernel computing or storing in half
precision returns): every element within 2^-11 of the truth, relative, so a check of sampled
elements at 4x the trial's per-element gate passes it, while its relative L2 error (~2.8e-4) is
14x the float32 trial gate (2e-5)."""
import torch
import torch.nn as nn


def coarse(t: torch.Tensor) -> torch.Tensor:
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


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
