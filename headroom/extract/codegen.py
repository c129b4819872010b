"""Python source for values: constructor arguments as code, and fresh tensors like the ones a call saw.

`Source` collects the imports and helper functions a generated file needs; `literal(value)`
writes a value as an expression (a config object as `LlamaConfig(**{...})`, a dataclass as
`Cls(**{...})`, a dtype as `torch.bfloat16`), or raises UserError naming what it cannot write.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

from headroom.errors import UserError
from headroom.extract.capture import TensorSpec


class Source:
    """Imports (module -> names) and helper definitions of a generated file."""

    def __init__(self) -> None:
        self.imports: dict[str, dict[str, str]] = {}  # module -> {name: alias}
        self.helpers: list[str] = []
        self._aliases: dict[str, tuple[str, str]] = {}  # alias -> (module, name)

    def name(self, module: str, name: str, alias: str | None = None) -> str:
        """The identifier a generated file uses for `module.name` (imported once)."""
        want = alias or name.split(".")[0]
        top = name.split(".")[0]
        taken = self._aliases.get(want)
        k = 1
        while taken is not None and taken != (module, top):
            k += 1
            want = f"{alias or top}_{k}"
            taken = self._aliases.get(want)
        self._aliases[want] = (module, top)
        self.imports.setdefault(module, {})[top] = want
        return want + name[len(top) :]

    def import_lines(self) -> list[str]:
        lines = []
        for module in sorted(self.imports):
            for name, alias in sorted(self.imports[module].items()):
                lines.append(f"from {module} import {name}" + (f" as {alias}" if alias != name else ""))
        return lines


def _class_ref(src: Source, cls: type, what: str) -> str:
    if "<locals>" in cls.__qualname__:
        raise UserError(f"{what}: {cls.__qualname__} is defined inside a function and cannot be imported")
    return src.name(cls.__module__, cls.__qualname__)


def _is_config(value: Any) -> bool:
    return callable(getattr(value, "to_diff_dict", None)) and callable(getattr(value, "to_dict", None))


def _config_expr(src: Source, value: Any, what: str) -> str:
    """A transformers config as a helper function that rebuilds it (checked to round-trip)."""
    cls = type(value)
    # Where a config was loaded from (_name_or_path: an hf: directory or hub id) is not part of the model.
    meta = ("transformers_version", "_name_or_path")
    d = {k: v for k, v in value.to_diff_dict().items() if k not in meta}
    try:
        again = cls(**d)
    except Exception as e:  # noqa: BLE001 - any failure means it cannot be written this way
        raise UserError(f"{what}: {cls.__name__}(**to_diff_dict()) does not rebuild the config ({e})") from None

    def strip(x: dict) -> dict:
        return {k: v for k, v in x.items() if k not in meta}

    if strip(again.to_dict()) != strip(value.to_dict()):
        raise UserError(f"{what}: {cls.__name__}(**to_diff_dict()) does not rebuild the same config")
    ref = _class_ref(src, cls, what)
    attn = getattr(value, "_attn_implementation", None)
    fname = f"_{cls.__name__.lower()}_{len(src.helpers)}"
    lines = [f"def {fname}():", f"    config = {ref}(**{{"]
    lines += [f"        {k!r}: {v!r}," for k, v in d.items()]
    lines.append("    })")
    if attn and attn != getattr(again, "_attn_implementation", None):
        lines.append(f"    config._attn_implementation = {attn!r}  # as the workload set it")
    lines.append("    return config")
    src.helpers.append("\n".join(lines))
    return f"{fname}()"


def literal(src: Source, value: Any, what: str) -> str:
    """`value` as a Python expression; UserError (naming `what`) for what cannot be written."""
    import torch

    if value is None or isinstance(value, (bool, str, bytes)):
        return repr(value)
    if isinstance(value, int):
        return repr(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else '-float("inf")'
        return repr(value)
    if isinstance(value, torch.dtype):
        return f"torch.{str(value).replace('torch.', '')}"
    if isinstance(value, torch.Size):
        return repr(tuple(value))
    if isinstance(value, enum.Enum):
        return f"{_class_ref(src, type(value), what)}.{value.name}"
    if isinstance(value, tuple):
        inner = ", ".join(literal(src, v, what) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(literal(src, v, what) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(src, k, what)}: {literal(src, v, what)}" for k, v in value.items()) + "}"
    if _is_config(value):
        return _config_expr(src, value, what)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [f for f in dataclasses.fields(value) if f.init]
        args = ", ".join(f"{f.name}={literal(src, getattr(value, f.name), what)}" for f in fields)
        return f"{_class_ref(src, type(value), what)}({args})"
    if isinstance(value, torch.Tensor):
        raise UserError(f"{what}: a tensor constructor argument cannot be written as code (shape {tuple(value.shape)})")
    raise UserError(f"{what}: a {type(value).__module__}.{type(value).__qualname__} cannot be written as code")


def _round(x: float, digits: int = 3) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


def tensor_expr(spec: TensorSpec) -> tuple[str, str]:
    """(expression making a fresh tensor like `spec`, a comment saying what was seen).

    Floats: normal with the mean and standard deviation seen (rounded); integers: uniform
    over the range seen, so indices stay inside their real bounds; bools: the fraction of
    True seen.
    """
    shape = repr(tuple(spec.shape))
    dt = f"torch.{spec.dtype}"
    seen = ""
    if spec.floating:
        mean, std = _round(spec.mean or 0.0), _round(spec.std or 0.0)
        seen = (
            f"seen: mean {mean:g}, std {std:g}, range [{_round(spec.lo or 0):g}, {_round(spec.hi or 0):g}]"
            if spec.lo is not None
            else "seen: empty"
        )
        if std == 0:
            expr = f"torch.full({shape}, {mean!r}, dtype={dt})"
        else:
            expr = f"torch.randn({shape}, dtype=torch.float32).mul_({std!r}).add_({mean!r})"
            if spec.dtype != "float32":
                expr += f".to({dt})"
        if spec.channels_last:
            expr += ".contiguous(memory_format=torch.channels_last)"
            seen += ", channels-last"
    elif spec.dtype == "bool":
        p = spec.mean if spec.mean is not None else 0.5
        seen = f"seen: {100 * p:.1f}% True"
        expr = (
            f"torch.ones({shape}, dtype=torch.bool)"
            if p >= 1
            else f"torch.zeros({shape}, dtype=torch.bool)"
            if p <= 0
            else f"torch.rand({shape}) < {_round(p)!r}"
        )
    else:
        lo = int(spec.lo) if spec.lo is not None else 0
        hi = int(spec.hi) if spec.hi is not None else 0
        seen = f"seen: values in [{lo}, {hi}]"
        expr = f"torch.randint({lo}, {hi + 1}, {shape}, dtype={dt})"
    return expr, seen
