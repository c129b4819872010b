# dlrm__InteractionArch: InteractionArch from the dlrm workload, in KernelBench's format.
# Written by `headroom extract dlrm --device cuda --module InteractionArch --out /root/out/work/dlrm-train-interaction/problem --json`.
#
# workload: flavour default, mode train, batch 65536, dtype float32, device cuda
# module:   torchrec.models.dlrm.InteractionArch, 1 instance(s): model.inter_arch
# calls per step: 1 (1 per instance)
# share: 29.69% of GPU kernel time: 9.860 ms of 33.211 ms per step, 24 kernels per step (forward 1.380 ms, backward 8.480 ms) (measured in dlrm__InteractionArch.trace.json.gz)
# constructed as: model.inter_arch (1 of 1 instance(s) with these arguments)
# inputs seen (calls): dense_features=(65536, 128) float32, sparse_features=(65536, 26, 128) float32 x1
# get_inputs() makes the most frequent (1 of 1 calls).
# Training workload: forward runs forward + backward (headroom.extract.autograd) and returns the output, the input gradients and the parameter gradients; verify a candidate with `ModelNew = with_backward(YourModelNew)`.

import torch
from headroom.extract.autograd import forward_backward
from torchrec.models.dlrm import InteractionArch as _Module


class Model(_Module):
    """InteractionArch exactly as dlrm constructs it (subclassed: same parameters and buffers)."""
    def forward(self, dense_features, sparse_features, grad_output_0):
        return forward_backward(self, super().forward, (dense_features, sparse_features), (grad_output_0,), autocast=None)


def get_inputs():
    return [
        torch.randn((65536, 128), dtype=torch.float32).mul_(0.0483).add_(0.0363),  # dense_features: (65536, 128) float32, seen: mean 0.0363, std 0.0483, range [0, 0.344]
        torch.randn((65536, 26, 128), dtype=torch.float32).mul_(0.112).add_(-0.000841),  # sparse_features: (65536, 26, 128) float32, seen: mean -0.000841, std 0.112, range [-1.15, 1.14]
        torch.randn((65536, 479), dtype=torch.float32),  # upstream gradient of output 0: (65536, 479) float32
    ]


def get_init_inputs():
    return [26]
