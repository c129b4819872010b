"""Knowledge kept as data: the TOML files shipped in headroom/data/, and a user's TOML files.

One reader, so every file gives the same one-line errors.
"""

from __future__ import annotations

import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.files import read_text

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError


@cache
def shipped(name: str) -> dict[str, Any]:
    """A shipped data file (e.g. ``rules.toml``), parsed once. Callers must not change it."""
    return tomllib.loads(resources.files("headroom.data").joinpath(name).read_text())


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """A user's TOML file; a missing, unreadable (a directory, no permission, not UTF-8) or invalid
    one is a UserError naming it."""
    path = Path(path)
    text = read_text(path, "a TOML file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: invalid TOML ({e})") from None


def loads(text: str) -> dict[str, Any]:
    return tomllib.loads(text)
