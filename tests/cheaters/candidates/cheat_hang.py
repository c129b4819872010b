"""Misbehaves: never returns from forward."""

import threading

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()

    def forward(self, x):
        threading.Event().wait()
        return x
