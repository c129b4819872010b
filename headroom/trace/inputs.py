"""The recorded input shapes of headroom's module ranges (record_shapes), as short text.

Kineto writes `Input Dims`/`Input type` on every cpu_op; the loader keeps them as raw views into the
chunk (msgspec.Raw, no lists built) and decodes them here for module ranges only: their `inputs`
column, e.g. ``bf16[4,2048,4096] i64[4,2048]`` (tensors only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import lazy_loader
import msgspec

from headroom.trace.ranges import MODULE_RANGE_PREFIX

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_loader.load("polars")  # imported on first use (a cached analysis needs none)

# Kineto's spellings of tensor element types (c10 scalar type names), as short dtype names.
DTYPE_NAMES = {
    "float": "f32",
    "double": "f64",
    "c10::Half": "f16",
    "c10::BFloat16": "bf16",
    "long int": "i64",
    "int": "i32",
    "short int": "i16",
    "signed char": "i8",
    "unsigned char": "u8",
    "bool": "bool",
    "c10::complex<float>": "c64",
    "c10::complex<double>": "c128",
    "c10::Float8_e4m3fn": "f8e4m3",
    "c10::Float8_e5m2": "f8e5m2",
}


def _inputs_text(dims: Any, types: Any) -> str:
    """record_shapes of a range, e.g. ``bf16[4,2048,4096] i64[4,2048]`` (tensors only)."""
    if not isinstance(dims, list) or not dims:
        return ""
    types = types if isinstance(types, list) else []
    parts = []
    for i, d in enumerate(dims):
        kind = types[i] if i < len(types) and isinstance(types[i], str) else ""
        if not isinstance(d, list) or kind in ("", "Scalar", "ScalarList", "TensorList", "GenericList"):
            continue
        if not all(isinstance(n, int) for n in d):
            continue
        parts.append(f"{DTYPE_NAMES.get(kind, kind)}[{','.join(str(n) for n in d)}]")
    return " ".join(parts)


def _raw_value(raw: bytes | msgspec.Raw) -> Any:
    return msgspec.json.decode(raw) if len(raw) else None


def module_inputs_text(dims: bytes | msgspec.Raw, types: bytes | msgspec.Raw) -> str:
    """A module range's `inputs` text from its raw `Input Dims`/`Input type` (empty: absent)."""
    return _inputs_text(_raw_value(dims), _raw_value(types))


def module_inputs(names: pl.Series, raw_args: Callable[[int], tuple[Any, Any]]) -> pl.Series:
    """The `inputs` column: the recorded input shapes of headroom's module ranges ("" elsewhere), decoded
    from their raw `Input Dims`/`Input type` text (`raw_args(row)`; empty text: absent), for the few module
    ranges only, never every cpu_op's."""
    mask = names.str.starts_with(MODULE_RANGE_PREFIX).fill_null(False)
    if not mask.any():
        return pl.repeat("", len(names), dtype=pl.String, eager=True)
    texts = [""] * len(names)
    for row in mask.arg_true().to_list():
        texts[row] = module_inputs_text(*raw_args(row))
    return pl.Series(texts, dtype=pl.String)
