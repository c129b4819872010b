"""The float32 precision settings every process sets explicitly (the TF32 headline baseline)."""

from __future__ import annotations

import warnings
from collections.abc import Callable


def set_tf32(enabled: bool) -> dict:
    """Set both TF32 flags (cuBLAS and cuDNN); return the resulting precision state."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled
    return precision_state()


def precision_state() -> dict:
    """The float32 precision settings in force (recorded in every result's ``baseline``)."""
    import torch

    def legacy(get: Callable[[], object], new_api: object, name: str) -> object:
        # torch refuses to read a legacy flag once its per-backend fp32_precision API was also used
        try:
            return get()
        except RuntimeError:
            return f"mixed ({name}={getattr(new_api, 'fp32_precision', 'unknown')})"

    conv = getattr(torch.backends.cudnn, "conv", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        matmul = legacy(lambda: bool(torch.backends.cuda.matmul.allow_tf32), torch.backends.cuda.matmul, "matmul")
        cudnn = legacy(lambda: bool(torch.backends.cudnn.allow_tf32), conv, "conv")
        st = {
            "allow_tf32_matmul": matmul,
            "allow_tf32_cudnn": cudnn,
            "float32_matmul_precision": legacy(torch.get_float32_matmul_precision, torch.backends, "backends"),
        }
        for key, obj in (("matmul_fp32_precision", torch.backends.cuda.matmul), ("cudnn_fp32_precision", conv)):
            v = getattr(obj, "fp32_precision", None) if obj is not None else None
            if v is not None:
                st[key] = str(v)
    return st
