"""Files a user gives headroom, and output paths it writes to: read with one-line errors, checked
before long work, written whole or not at all.

Every output (traces, annotated traces, figures, results, manifests) is written through
`headroom.jsonio.atomic_file`: to a temporary file beside the destination, renamed over it
only once complete, with the mode the umask gives; so a full disk, an error or Ctrl-C leaves
the old file (or none), never half of a new one, and an OS error is one line naming the path.
The checks here fail a command at its start rather than after minutes of profiling.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from headroom.errors import UserError
from headroom.jsonio import atomic_file


def _os_error(path: Path, e: OSError, verb: str) -> UserError:
    return UserError(f"{path}: {verb} ({e.strerror or e.__class__.__name__})")


def read_bytes(path: str | os.PathLike, expected: str) -> bytes:
    """A user's file (`expected`: what it should be, e.g. "a TOML file"); missing, a directory or
    unreadable is one UserError naming the file."""
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{p}: is a directory, expected {expected}") from None
    except OSError as e:
        raise _os_error(p, e, "cannot read") from None


def read_text(path: str | os.PathLike, expected: str) -> str:
    """`read_bytes`, decoded as UTF-8 (text that is not is one UserError naming the byte offset)."""
    raw = read_bytes(path, expected)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (at byte offset {e.start}); expected {expected}") from None


def check_output_dir(directory: str | os.PathLike, create: bool = True) -> Path:
    """Create `directory` if needed and make sure a file can be written in it. `create=False`: leave
    the disk as it is (a command that may still refuse its input), and check that the nearest
    existing folder above it can be written, so that creating it later will work."""
    d = Path(directory)
    if not create and not d.exists():
        above = next((p for p in d.absolute().parents if p.exists()), Path("/"))
        if not above.is_dir():
            raise UserError(f"{d}: {above} exists and is not a directory")
        if not os.access(above, os.W_OK | os.X_OK):
            raise UserError(f"{d}: cannot create the directory ({above} is not writable)")
        return d
    try:
        d.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"{d}: exists and is not a directory") from None
    except OSError as e:
        raise _os_error(d, e, "cannot create the directory") from None
    if not d.is_dir():
        raise UserError(f"{d}: exists and is not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=d, prefix=".headroom-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise _os_error(d, e, "cannot write in the directory") from None
    return d


def check_output_file(path: str | os.PathLike) -> Path:
    """Fail now, not after the work, if `path` cannot be written (a directory, a read-only place, ...)."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{p}: is a directory, expected a file name")
    check_output_dir(p.parent)
    return p


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same inode (a hard link, a symlink, `./x` and `x`), or, when
    one does not exist yet, the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output_not_input(
    out: str | os.PathLike,
    inputs: Iterable[str | os.PathLike | None],
    reads: Callable[[Path], bool] = lambda p: True,
    option: str = "--out",
) -> Path:
    """Refuse an output that resolves to something the command reads: one of `inputs` (the same inode,
    or the same path), or a file inside an input directory that the command would read there
    (`reads(path)`: e.g. a trace directory reads its *.json files). Writing over an input destroys it
    (the candidate's source becomes JSON), and a file left in an input directory is read back as input
    by the next command. Checked before any work."""
    o = Path(out)
    for given in inputs:
        if given is None:
            continue
        i = Path(given)
        if _same_file(o, i):
            raise UserError(
                f"{option} {o}: is also an input of this command; writing it would destroy it (choose another {option})"
            )
        if i.is_dir() and _same_file(o.parent, i) and reads(o):
            raise UserError(
                f"{option} {o}: would be written into the input directory {i}, where it would "
                f"be read as input (choose another {option})"
            )
    return o


def check_replaceable_dir(
    directory: str | os.PathLike, inputs: Iterable[str | os.PathLike | None], own: Iterable[str], option: str = "--out"
) -> Path:
    """A directory a command replaces whole (a run's folder): refused when it holds one of the command's
    `inputs` (they would be deleted with it), and when it exists, is not empty and holds none of the
    files the command writes there (`own`): it is someone else's folder, not an earlier run."""
    d = Path(directory)
    if not d.name or d.resolve() == Path.cwd().resolve() or d.resolve() == Path.home().resolve():
        raise UserError(f"{option} {d}: a run's own folder is replaced whole; name a new one (e.g. out/run)")
    for given in inputs:
        if given is None:
            continue
        i = Path(given).resolve()
        if i == d.resolve() or d.resolve() in i.parents:
            raise UserError(
                f"{option} {d}: holds an input of this command ({given}), which replacing the "
                f"folder would delete (choose another {option})"
            )
    if d.is_dir() and any(d.iterdir()) and not any((d / name).exists() for name in own):
        raise UserError(
            f"{option} {d}: a folder that is not an earlier run (no {' or '.join(own)}); it would be "
            f"replaced whole (choose a new or empty one)"
        )
    return d


def write_atomic(path: str | os.PathLike, data: bytes | str | Callable[[BinaryIO], Any]) -> Path:
    """Write bytes, text, or whatever a function writes to a binary file, to `path` atomically."""
    with atomic_file(path) as f:
        if callable(data):
            data(f)
        else:
            f.write(data.encode() if isinstance(data, str) else data)
    return Path(path)
