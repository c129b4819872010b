"""The one device resolver."""

from __future__ import annotations

import pytest
import torch

from headroom.devices import resolve_device
from headroom.errors import UserError


def test_auto_and_cpu():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device(None) == resolve_device("auto")


@pytest.mark.parametrize(
    "name, message",
    [
        ("tpu", "unknown --device 'tpu'"),
        ("meta", "only cpu and cuda are supported"),
    ],
)
def test_bad_devices_are_one_line_errors(name, message):
    with pytest.raises(UserError, match=message):
        resolve_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu():
    for name in ("cuda", "cuda:1"):
        with pytest.raises(UserError, match="no CUDA device is available here"):
            resolve_device(name)
