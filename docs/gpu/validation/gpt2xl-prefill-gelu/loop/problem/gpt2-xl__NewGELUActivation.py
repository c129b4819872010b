# gpt2-xl__NewGELUActivation: NewGELUActivation from the gpt2-xl workload, in KernelBench's format.
# Written by `headroom extract gpt2-xl --device cuda --module NewGELUActivation --out /root/out/work/gpt2xl-prefill-gelu/problem --json`.
#
# workload: flavour default, mode infer, phase prefill, kv_cache dynamic, batch 8, seq 1024, dtype bfloat16, device cuda, layers 48
# module:   transformers.activations.NewGELUActivation, 48 instance(s): transformer.h.0.mlp.act, transformer.h.1.mlp.act, transformer.h.2.mlp.act, transformer.h.3.mlp.act, ...
# calls per step: 48 (1 per instance)
# share: 29.52% of GPU kernel time: 21.666 ms of 73.404 ms per step, 384 kernels per step (measured in gpt2-xl__NewGELUActivation.trace.json.gz)
# constructed as: transformer.h.0.mlp.act (48 of 48 instance(s) with these arguments)
# inputs seen (calls): input=(8, 1024, 6400) bfloat16 x48
# get_inputs() makes the most frequent (48 of 48 calls).

import torch
from transformers.activations import NewGELUActivation as _Module


class Model(_Module):
    """NewGELUActivation exactly as gpt2-xl constructs it (subclassed: same parameters and buffers)."""
    pass


def get_inputs():
    return [
        torch.randn((8, 1024, 6400), dtype=torch.float32).mul_(0.796).add_(0.0025).to(torch.bfloat16),  # input: (8, 1024, 6400) bfloat16, seen: mean 0.0025, std 0.796, range [-4.53, 4.44]
    ]


def get_init_inputs():
    return []
