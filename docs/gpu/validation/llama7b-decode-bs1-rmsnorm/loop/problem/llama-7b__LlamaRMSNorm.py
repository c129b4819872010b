# llama-7b__LlamaRMSNorm: LlamaRMSNorm from the llama-7b workload, in KernelBench's format.
# Written by `headroom extract llama-7b --phase decode --batch 1 --device cuda --module LlamaRMSNorm --out /root/out/work/llama7b-decode-bs1-rmsnorm/problem --json`.
#
# workload: flavour default, mode infer, phase decode, kv_cache static, batch 1, seq 2048, dtype bfloat16, device cuda, layers 32
# module:   transformers.models.llama.modeling_llama.LlamaRMSNorm, 65 instance(s): model.layers.0.input_layernorm, model.layers.0.post_attention_layernorm, model.layers.1.input_layernorm, model.layers.1.post_attention_layernorm, ...
# calls per step: 65 (1 per instance)
# share: 11.51% of GPU kernel time: 0.752 ms of 6.536 ms per step, 520 kernels per step (measured in llama-7b__LlamaRMSNorm.trace.json.gz)
# constructed as: model.layers.0.input_layernorm (65 of 65 instance(s) with these arguments)
# inputs seen (calls): hidden_states=(1, 1, 4096) bfloat16 x65
# get_inputs() makes the most frequent (65 of 65 calls).

import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm as _Module

PARAM_DTYPE = torch.bfloat16  # the dtype the workload holds this module's parameters in


class Model(_Module):
    """LlamaRMSNorm exactly as llama-7b constructs it (subclassed: same parameters and buffers)."""
    def __init__(self, *init_inputs):
        super().__init__(*init_inputs)
        for p in self.parameters():  # the workload materialises its parameters in --dtype
            if p.is_floating_point():
                p.data = p.data.to(PARAM_DTYPE)


def get_inputs():
    return [
        torch.randn((1, 1, 4096), dtype=torch.float32).mul_(0.0201).add_(2.14e-05).to(torch.bfloat16),  # hidden_states: (1, 1, 4096) bfloat16, seen: mean 2.14e-05, std 0.0201, range [-0.0659, 0.0674]
    ]


def get_init_inputs():
    return [4096, 1e-05]
