"""The recorded inputs (record_shapes) of chosen CPU ops, read on demand for the roofline.

The loader keeps `Input Dims`/`Input type` only for module ranges (headroom/trace/inputs.py): decoding them
for every cpu_op would slow every load. `op_calls(path, ids)` reads the trace file once more, on demand
(`headroom targets --roofline`), decoding only the ops whose `External id` is asked for: their tensor shapes
and dtypes, tensor lists, and the `Concrete Inputs` texts of their scalar arguments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from headroom.errors import UserError
from headroom.trace.document import read_bytes
from headroom.trace.inputs import DTYPE_NAMES
from headroom.trace.schema import KEYS


@dataclass(frozen=True)
class Tensor:
    """One tensor argument: its short dtype name (`bf16`, `f32`, `i64`), shape and strides (empty: not
    recorded)."""

    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...] = ()

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def stored(self) -> int:
        """Elements held in memory: a dimension of stride 0 (an expanded view, `x.expand(...)`) repeats
        one element, so reading the tensor reads only the others."""
        if len(self.strides) != len(self.shape):
            return self.numel
        n = 1
        for d, s in zip(self.shape, self.strides):
            n *= d if s != 0 else 1
        return n


@dataclass(frozen=True)
class OpCall:
    """One op call's inputs by position: `tensors[i]` (None where argument i is not one tensor), `lists[i]`
    (the tensors of a TensorList argument, else empty) and `concrete[i]` (the scalar's text, "" if none)."""

    name: str
    tensors: tuple[Tensor | None, ...]
    lists: tuple[tuple[Tensor, ...], ...]
    concrete: tuple[str, ...]

    def tensor(self, i: int) -> Tensor | None:
        return self.tensors[i] if 0 <= i < len(self.tensors) else None

    def value(self, i: int) -> str:
        return self.concrete[i] if 0 <= i < len(self.concrete) else ""


class _Args(
    msgspec.Struct, rename={c: KEYS[c] for c in ("external_id", "dims", "types", "strides", "concrete")}, gc=False
):
    external_id: int | str | None = None
    dims: msgspec.Raw = msgspec.Raw()
    types: msgspec.Raw = msgspec.Raw()
    strides: msgspec.Raw = msgspec.Raw()
    concrete: msgspec.Raw = msgspec.Raw()


class _Event(msgspec.Struct, gc=False):
    cat: str | None = None
    name: str | None = None
    args: _Args | None = None


class _File(msgspec.Struct, gc=False):
    traceEvents: list[_Event] = []


def _raw(raw: msgspec.Raw) -> list:
    v = msgspec.json.decode(raw) if len(raw) else None
    return v if isinstance(v, list) else []


def _ints(v) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, list) and all(isinstance(n, int) for n in v) else ()


def _tensor(dims, kind, strides=None) -> Tensor | None:
    if not isinstance(dims, list) or not isinstance(kind, str) or not all(isinstance(n, int) for n in dims):
        return None
    st = _ints(strides)
    return Tensor(DTYPE_NAMES.get(kind, kind), tuple(dims), st if len(st) == len(dims) else ())


def _call(name: str, args: _Args) -> OpCall:
    dims, types, concrete = _raw(args.dims), _raw(args.types), _raw(args.concrete)
    strides = _raw(args.strides)
    tensors: list = []
    lists: list = []
    for i, d in enumerate(dims):
        kind = types[i] if i < len(types) else ""
        if kind == "TensorList" and isinstance(d, list):
            # Kineto records the list's shapes, not their dtypes: the list shares the op's first tensor dtype.
            first = next(
                (
                    t
                    for t in types
                    if isinstance(t, str) and t not in ("", "Scalar", "ScalarList", "TensorList", "GenericList")
                ),
                "",
            )
            st = strides[i] if i < len(strides) and isinstance(strides[i], list) else []
            lists.append(
                tuple(
                    t
                    for t in (_tensor(x, first, st[j] if j < len(st) else None) for j, x in enumerate(d))
                    if t is not None
                )
            )
            tensors.append(None)
            continue
        lists.append(())
        tensors.append(
            _tensor(d, kind, strides[i] if i < len(strides) else None)
            if kind not in ("", "Scalar", "ScalarList", "GenericList")
            else None
        )
    texts = tuple(str(c) if isinstance(c, str) else "" for c in concrete)
    return OpCall(name, tuple(tensors), tuple(lists), texts)


def op_calls(path: str | Path, ids: Iterable[int]) -> dict[int, OpCall]:
    """The cpu_ops of the trace at `path` whose External id is one of `ids`, decoded (see the module)."""
    wanted = {int(i) for i in ids}
    if not wanted:
        return {}
    try:
        doc = msgspec.json.decode(read_bytes(Path(path)), type=_File)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise UserError(f"{path}: the op inputs cannot be read ({e})") from None
    except OSError as e:
        raise UserError(f"{path}: {e.strerror or e} (reading the op inputs)") from None
    out: dict[int, OpCall] = {}
    for ev in doc.traceEvents:
        a = ev.args
        if ev.cat != "cpu_op" or a is None or a.external_id is None or not len(a.dims):
            continue
        try:
            key = int(a.external_id)
        except ValueError:
            continue
        if key in wanted and key not in out:
            out[key] = _call(ev.name or "", a)
    return out
