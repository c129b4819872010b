"""The float32 precision settings every process sets explicitly (the TF32 headline baseline)."""

from __future__ import annotations

import warnings


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

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st = {"allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
              "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
              "float32_matmul_precision": torch.get_float32_matmul_precision()}
        for key, obj in (("matmul_fp32_precision", torch.backends.cuda.matmul),
                         ("cudnn_fp32_precision", getattr(torch.backends.cudnn, "conv", None))):
            v = getattr(obj, "fp32_precision", None) if obj is not None else None
            if v is not None:
                st[key] = str(v)
    return st
