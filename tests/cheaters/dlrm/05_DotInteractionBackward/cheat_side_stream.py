"""Cheat (DLRM-Bench 05): the fast backward, launched on a side stream the caller never waits for.

On a CPU (no streams) the work goes to a background thread that fills the output later.
"""

import threading
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        li, lj = torch.tril_indices(num_features, num_features, offset=-1)
        self.register_buffer("both", torch.cat([li * num_features + lj, lj * num_features + li]))
        self.f = num_features
        self.side = None

    def _compute(self, z, grad_inter):
        batch, f, _ = z.shape
        g = torch.zeros(batch, f * f, dtype=z.dtype, device=z.device)
        g.index_copy_(1, self.both, torch.cat([grad_inter, grad_inter], dim=1))
        return torch.bmm(g.view(batch, f, f), z)

    def forward(self, z, grad_inter):
        if z.is_cuda:
            if self.side is None:
                self.side = torch.cuda.Stream()
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                return self._compute(z, grad_inter)
        out = torch.empty_like(z)

        def work():
            time.sleep(0.05)
            with torch.no_grad():
                out.copy_(self._compute(z, grad_inter))

        threading.Thread(target=work, daemon=True).start()
        return out
