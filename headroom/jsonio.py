"""The one JSON writer: NaN-safe (non-finite floats become null, so the output is valid JSON) and,
for files, atomic (a temporary file renamed into place: a failure never leaves half a file)."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import Any, BinaryIO

from headroom.errors import UserError

# Field metadata for `plain`: leave the key out while the value is None (`field(default=None, metadata=OMIT_NONE)`).
OMIT_NONE = {"omit_none": True}
# Field metadata for `plain`: a field that is no part of the JSON object (working state, a cached table).
SKIP = {"skip": True}


def json_key(key: str, omit_none: bool = False) -> dict[str, Any]:
    """Field metadata for `plain`: the JSON key when it differs from the field's name."""
    return {"json_key": key, "omit_none": omit_none}


def rounded(digits: int) -> dict[str, Any]:
    """Field metadata for `plain`: a float (or each float of a list) rounded to `digits` decimals."""
    return {"round": digits}


def omit_if(test: Callable[[Any], bool]) -> dict[str, Any]:
    """Field metadata for `plain`: leave the key out when `test(the object)` holds (a manifest key that only
    multi-process runs write)."""
    return {"omit_if": test}


def encoded(encode: Callable[[Any], Any]) -> dict[str, Any]:
    """Field metadata for `plain`: the field's value (when not None) as `encode` writes it (an analysis as its
    `classify --json` document, a pair of numbers as a named object)."""
    return {"encode": encode}


def columns(*names: str) -> dict[str, Any]:
    """Field metadata for `plain`: of a DataFrame field, these columns only, in this order."""
    return {"columns": names}


def _keys(cls: type) -> tuple[tuple[str, str], ...]:
    """(key, attribute) of what `plain` writes: the class's `JSON_KEYS` (fields and properties in output
    order, a computed value among them; a `(key, property)` pair where a property's name is not its key)
    when it declares them, else its fields in declaration order."""
    declared = getattr(cls, "JSON_KEYS", None)
    names = tuple(declared) if declared is not None else tuple(f.name for f in dataclasses.fields(cls))
    return tuple((n, n) if isinstance(n, str) else (n[0], n[1]) for n in names)


def _round(value: Any, digits: int) -> Any:
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, (list, tuple)):
        return [_round(v, digits) for v in value]
    return value


def _records(frame: Any, names: tuple[str, ...] | None) -> list[dict[str, Any]]:
    """A DataFrame as one object per row, numpy values as Python ones."""
    if names is not None:
        frame = frame[list(names)]
    return [{str(k): plain(v) for k, v in r.items()} for r in frame.to_dict(orient="records")]


def plain(obj: Any) -> Any:
    """A result as JSON-ready builtins, the one encoder of result types: a dataclass becomes an object of its
    fields in declaration order (or of its `JSON_KEYS`, properties among them), keys, omissions and rounding
    as each field's metadata says (`json_key`, `OMIT_NONE`, `omit_if`, `rounded`, `encoded`, `SKIP`,
    `columns`; a property's in the class's `JSON_META`),
    recursively through lists, tuples and dicts; a msgspec Struct as `msgspec.to_builtins` makes it; enums as
    their value, paths as text, numpy scalars and arrays as Python values, a DataFrame as its rows."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        meta: dict[str, Mapping[str, Any]] = {f.name: f.metadata for f in dataclasses.fields(obj)}
        meta.update(getattr(type(obj), "JSON_META", {}))  # the metadata of properties named in JSON_KEYS
        out = {}
        for key, name in _keys(type(obj)):
            m = meta.get(name, {})
            if m.get("skip") or (m.get("omit_if") is not None and m["omit_if"](obj)):
                continue
            value = getattr(obj, name)
            if value is None and m.get("omit_none"):
                continue
            if m.get("round") is not None:
                value = _round(value, m["round"])
            if value is not None and m.get("encode") is not None:
                value = m["encode"](value)
            key = m.get("json_key", key)
            out[key] = _records(value, m.get("columns")) if _is_frame(value) else plain(value)
        return out
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return plain(obj.value)
    if isinstance(obj, PurePath):
        return str(obj)
    if type(obj).__module__ == "numpy":
        return _default(obj)
    if _is_frame(obj):
        return _records(obj, None)
    if _is_struct(obj):
        import msgspec

        return plain(msgspec.to_builtins(obj))
    return obj


def _is_frame(obj: Any) -> bool:
    return type(obj).__name__ == "DataFrame" and type(obj).__module__.startswith("pandas")


def _is_struct(obj: Any) -> bool:
    # msgspec is imported only for a value that is one of its structs (a base module stays light to import).
    return any(c.__module__ == "msgspec" and c.__name__ == "Struct" for c in type(obj).__mro__)


def from_plain(cls: Any, value: Any) -> Any:
    """`plain`'s inverse for a result dataclass read back from JSON: the fields whose annotation names a
    dataclass (or a list of one) become one, every other value is kept as it was read (a number stays an
    int or a float, as in the file), so `plain(from_plain(C, d)) == d`."""
    import typing

    if not (dataclasses.is_dataclass(cls) and isinstance(value, dict)):
        return value
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f.metadata.get("json_key", f.name)
        if f.metadata.get("skip") or key not in value:
            continue
        kind, v = hints[f.name], value[key]
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if dataclasses.is_dataclass(kind):
            v = from_plain(kind, v)
        elif typing.get_origin(kind) is list and args and dataclasses.is_dataclass(args[0]) and isinstance(v, list):
            v = [from_plain(args[0], x) for x in v]
        elif len(args) == 1 and dataclasses.is_dataclass(args[0]):  # Optional[SomeResult]
            v = from_plain(args[0], v)
        kwargs[f.name] = v
    return typing.cast(Any, cls)(**kwargs)


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _default(o: Any) -> Any:
    """numpy scalars and arrays as Python values, anything else (paths, enums) as its text."""
    item = getattr(o, "item", None)
    if callable(item) and type(o).__module__ == "numpy":
        value = o.tolist() if hasattr(o, "ndim") and o.ndim else item()
        return _finite(value)
    return str(o)


def member(doc: Any, key: str) -> dict[str, Any]:
    """`doc[key]` when `doc` is a JSON object and that member is one too, else an empty one (a manifest's
    optional sections: `member(manifest, "timing")`)."""
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}


def dumps(obj: Any, indent: int | None = None) -> str:
    """`obj` as JSON text (result dataclasses as `plain` makes them), NaN and infinities as null."""
    return json.dumps(_finite(plain(obj)), indent=indent, default=_default, allow_nan=False)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _os_error(path: Path, e: OSError, verb: str = "cannot write") -> UserError:
    return UserError(f"{path}: {verb} ({e.strerror or e.__class__.__name__})")


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` only when the block ends without an error (fsync'd, renamed).

    The file gets the mode `open()` would give it (0666 less the umask); an OS error (a read-only
    place, a full disk, a directory in the way) is a UserError naming `path`.
    """
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _os_error(path, e) from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise _os_error(path, e) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    """Write `obj` to `path` as JSON, atomically; returns the path."""
    with atomic_file(path) as f:
        f.write((dumps(obj, indent=indent) + "\n").encode())
    return Path(path)
