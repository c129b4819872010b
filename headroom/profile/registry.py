"""The workload registry: the plug-ins in `headroom.workloads` (the top-level `workloads/`
folder), files given with `--workload-file`, and `hf:<hub id or directory>` names built from a
Hugging Face configuration."""

from __future__ import annotations

import importlib
import os
import pkgutil
import warnings
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.profile.workload import DOMAINS, WorkloadSpec
from headroom.pyfile import import_file

_REGISTRY: dict[str, WorkloadSpec] = {}
_DISCOVERED = False
_DISCOVERY_ERRORS: dict[str, str] = {}
# Workload names that are a Hugging Face hub id or a local directory holding config.json.
HF_PREFIX = "hf:"


def register_workload(spec: WorkloadSpec) -> WorkloadSpec:
    """Add a workload to the registry (a module re-imported from the same file replaces its own)."""
    if not isinstance(spec, WorkloadSpec):
        raise TypeError("register_workload takes a WorkloadSpec")
    old = _REGISTRY.get(spec.name)
    if old is not None and old.source and spec.source and old.source != spec.source:
        raise UserError(f"workload '{spec.name}' is defined twice: {old.source} and {spec.source}")
    _REGISTRY[spec.name] = spec
    return spec


def discover() -> None:
    """Import every module of the `workloads` package once (each registers its specs)."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    import headroom.workloads as workloads

    for info in pkgutil.iter_modules(workloads.__path__):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"headroom.workloads.{info.name}")
            register_declared(module, getattr(module, "__file__", "") or "")
        except Exception as e:  # one broken module must not hide the others
            _DISCOVERY_ERRORS[info.name] = f"{type(e).__name__}: {e}"
            warnings.warn(f"headroom: workloads/{info.name}.py failed to import: {e}", stacklevel=2)


def register_declared(module: Any, source: str) -> list[WorkloadSpec]:
    """Register a module's `WORKLOAD` / `WORKLOADS` (for modules that do not call register_workload)."""
    declared = []
    if isinstance(getattr(module, "WORKLOAD", None), WorkloadSpec):
        declared.append(module.WORKLOAD)
    declared.extend(s for s in getattr(module, "WORKLOADS", None) or [] if isinstance(s, WorkloadSpec))
    for s in declared:
        if not s.source:
            s.source = source
        if _REGISTRY.get(s.name) is not s:
            register_workload(s)
    return declared


def list_workloads() -> list[WorkloadSpec]:
    discover()
    return sorted(_REGISTRY.values(), key=lambda s: (DOMAINS.index(s.domain), s.name))


def workload_names() -> list[str]:
    return [s.name for s in list_workloads()]


def get_workload(name: str) -> WorkloadSpec:
    discover()
    spec = _REGISTRY.get(name)
    if spec is None and name.startswith(HF_PREFIX):
        spec = register_workload(_hf_workload(name))
    if spec is None:
        raise UserError(f"unknown workload '{name}'; known: {', '.join(workload_names())}")
    return spec


def _hf_workload(name: str) -> WorkloadSpec:
    """`hf:<hub id or local directory>`: built from its configuration (workloads/_hf_config.py)."""
    try:
        from headroom.workloads._hf_config import hf_workload
    except ImportError as e:
        raise UserError(f"{name}: needs transformers ({e})") from None
    return hf_workload(name)


def load_workload_file(path: str | os.PathLike[str]) -> list[WorkloadSpec]:
    """Import a Python file that defines workloads; returns the specs it added.

    The file calls `register_workload(WorkloadSpec(...))`, or defines a module-level
    `WORKLOAD` (a spec) or `WORKLOADS` (a list of specs), which are registered here.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such workload file")
    discover()
    before = dict(_REGISTRY)
    try:
        module = import_file(path, "workload")
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"{path}: failed to import ({type(e).__name__}: {e})") from e
    register_declared(module, str(path))
    added = [s for n, s in _REGISTRY.items() if before.get(n) is not s]
    if not added:
        raise UserError(f"{path}: defines no workload (call register_workload or set WORKLOAD)")
    return added
