"""Cheat: the work runs where the timer does not look.

On a GPU: on a side stream that is never joined to the caller's stream (a
harness that records its end event on the current stream does not wait for
it). On a CPU: on a background thread that fills the returned buffer later.
"""

import threading
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.side = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            if self.side is None:
                self.side = torch.cuda.Stream()
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                out = torch.nn.functional.gelu(self.linear(x))
                for _ in range(20):  # make the hidden part large
                    out = out * 1.0
            return out
        out = torch.empty(x.shape[0], self.linear.out_features, dtype=x.dtype)

        def work():
            time.sleep(0.05)
            with torch.no_grad():
                out.copy_(torch.nn.functional.gelu(self.linear(x)))

        threading.Thread(target=work, daemon=True).start()
        return out
