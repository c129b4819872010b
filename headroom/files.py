"""Files headroom writes: whole or not at all, with the permissions the user's umask gives, and JSON
that other tools can read (never NaN or Infinity).

Every output path (traces, annotated traces, figures, results, manifests) goes through
:func:`write_atomic`: the bytes go to a temporary file beside the destination, which is
renamed over it only once complete, so a full disk, an error or Ctrl-C leaves the old file
(or none), never half of a new one. An OS error becomes a :class:`UserError` that names the
path and the reason, which the CLI prints as one line (exit 2).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from headroom.errors import UserError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def os_error(path: str | os.PathLike, e: OSError, verb: str = "cannot write") -> UserError:
    """One line for an OS error on `path`: `out/x.json: cannot write (Permission denied)`."""
    reason = e.strerror or e.__class__.__name__
    return UserError(f"{path}: {verb} ({reason})")


def check_output_dir(directory: str | os.PathLike) -> Path:
    """Create `directory` if needed and make sure a file can be written in it (before long work)."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"{d}: exists and is not a directory") from None
    except OSError as e:
        raise os_error(d, e, "cannot create the directory") from None
    if not d.is_dir():
        raise UserError(f"{d}: exists and is not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=d, prefix=".headroom-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise os_error(d, e, "cannot write in the directory") from None
    return d


def check_output_file(path: str | os.PathLike) -> Path:
    """Fail now, not after the work, if `path` cannot be written (a directory, a read-only place, ...)."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{p}: is a directory, expected a file name")
    check_output_dir(p.parent if str(p.parent) else Path("."))
    return p


def write_atomic(path: str | os.PathLike, data: bytes | str | Callable[[Any], None]) -> Path:
    """Write `data` (bytes, text, or a function that writes to a binary file) to `path` atomically.

    The new file gets mode 0666 minus the umask, as `open()` would give it.
    """
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{p}: is a directory, expected a file name")
    parent = p.parent if str(p.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise os_error(parent, e, "cannot create the directory") from None
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{p.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
        tmp = None
    except OSError as e:
        raise os_error(p, e) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return p


def json_safe(obj: Any) -> Any:
    """`obj` with NaN/Infinity as null, numpy scalars and arrays as Python values, paths as strings."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    item = getattr(obj, "item", None)   # numpy scalars
    if callable(item) and getattr(obj, "shape", None) == ():
        return json_safe(item())
    tolist = getattr(obj, "tolist", None)   # numpy arrays
    if callable(tolist):
        return json_safe(tolist())
    return str(obj)


def dumps(obj: Any, indent: int | None = None) -> str:
    """JSON text any parser accepts: non-finite numbers become null (never `NaN`/`Infinity`)."""
    return json.dumps(json_safe(obj), indent=indent, allow_nan=False, ensure_ascii=False)


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    """`obj` as strict JSON at `path`, atomically."""
    return write_atomic(path, dumps(obj, indent=indent) + "\n")
