"""Import a Python file by path (workload files, KernelBench problems and candidates)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from headroom.errors import UserError


def import_file(path: str | Path, prefix: str) -> ModuleType:
    """Import a .py file as a fresh module (a unique name, registered in sys.modules)."""
    p = Path(path).resolve()
    digest = hashlib.sha1(str(p).encode()).hexdigest()[:10]
    name = f"_headroom_{prefix}_{p.stem.replace('-', '_').replace('.', '_')}_{digest}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise UserError(f"{p}: cannot be imported as a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod
