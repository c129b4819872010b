"""One global torch state for every call of the model in a child (trials and timed phases alike):
``torch_state`` reads it, ``_Calls`` sets the TF32 flags and ``no_grad`` and checks it at every call."""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Any

import torch

from headroom.verify.precision import precision_state, set_tf32


class StateMismatch(Exception):
    """torch's global state changed between two calls of the model, outside them (a harness self-check)."""


_TF32_KEYS = (
    "allow_tf32_matmul",
    "allow_tf32_cudnn",
    "float32_matmul_precision",
    "matmul_fp32_precision",
    "cudnn_fp32_precision",
)


def torch_state() -> dict[str, Any]:
    """Every piece of torch's global state a candidate can read that a harness could set differently for
    a trial and a timed call: deterministic algorithms and memory filling, grad and inference mode,
    default dtype, float32 matmul precision and the TF32 flags, threads, autocast, cuDNN, cuBLAS
    reduced-precision reductions, mkldnn, anomaly detection, the warning filters."""
    import torch.utils.deterministic as det

    n_filters = len(warnings.filters)
    st: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st.update(precision_state())
        mm = torch.backends.cuda.matmul
        cudnn = torch.backends.cudnn
        st.update(
            {
                "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
                "fill_uninitialized_memory": bool(det.fill_uninitialized_memory),  # type: ignore[attr-defined]
                "grad_enabled": torch.is_grad_enabled(),
                "inference_mode": torch.is_inference_mode_enabled(),
                "default_dtype": str(torch.get_default_dtype()),
                "num_threads": torch.get_num_threads(),
                "num_interop_threads": torch.get_num_interop_threads(),
                "cudnn": (cudnn.enabled, cudnn.benchmark, cudnn.deterministic),
                "matmul_reduced_precision": (
                    mm.allow_fp16_reduced_precision_reduction,
                    mm.allow_bf16_reduced_precision_reduction,
                ),
                "mkldnn": torch.backends.mkldnn.enabled,
                "anomaly": torch.is_anomaly_enabled(),
                "warning_filters": n_filters,
            }
        )
        for dev in ("cpu", "cuda"):
            try:
                st[f"autocast_{dev}"] = (torch.is_autocast_enabled(dev), str(torch.get_autocast_dtype(dev)))
            except (RuntimeError, TypeError, AttributeError):  # an older torch: no per-device query
                st[f"autocast_{dev}"] = None
    return st


class _Calls:
    """Trials and timed phases call the model through one context, under one global state.

    ``call(tf32)`` sets the TF32 flags and ``no_grad``, and checks that torch's global state
    (``torch_state``) is what the previous call left: nothing the harness does between calls may
    tell a trial from a timed phase. A change made by the model inside a call carries over (it is
    its own); one made anywhere else is a mismatch, and the child stops with the reason (verdict
    ``error``), never silently. The reference's strict-FP32 arm differs from its TF32 arm in the
    TF32 flags only, which are then not compared."""

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None
        self.tf32: bool | None = None
        self.inside = False  # ``last`` was taken inside a call (else after a memory, launches or compile command)

    @contextmanager
    def call(self, tf32: bool):
        set_tf32(tf32)
        try:
            with torch.no_grad():
                now = torch_state()
                if self.last is not None:
                    skip: set[str] = set() if self.inside else {"grad_enabled", *_TF32_KEYS}
                    if tf32 != self.tf32:
                        skip.update(_TF32_KEYS)
                    diff = [
                        f"{k}: {self.last.get(k)!r} -> {v!r}"
                        for k, v in now.items()
                        if k not in skip and self.last.get(k) != v
                    ]
                    if diff:
                        raise StateMismatch(
                            "harness self-check: torch's global state changed between two calls "
                            "of the model, outside them (" + "; ".join(diff)[:400] + ")"
                        )
                self.last, self.tf32, self.inside = now, tf32, True
                yield
        finally:
            set_tf32(True)

    def returned(self) -> None:
        """Inside the call's context, after the model returned: what it left is the next call's start."""
        self.last = torch_state()
        self.inside = True

    def outside(self) -> None:
        """After a command that ran the model outside ``call`` (memory, launches, compile)."""
        self.last = torch_state()
        self.inside = False
