"""Swap a candidate's `ModelNew` in for every instance of a module class, in place.

Each instance gets its own `ModelNew(*init)`, `init` being the positional arguments that
instance was constructed with (what `headroom extract` writes as `get_init_inputs()`).
The new module is first built with its parameters on the meta device; when its state_dict
has the original's keys and shapes, its parameters and persistent buffers are *the
original's tensors* (the same `nn.Parameter` objects): no memory, the same weights
bit for bit, and in training the optimizer steps the very parameters both variants use.
A `ModelNew` whose state_dict differs (e.g. a `_load_from_state_dict` hook that fuses
weights) is built for real and loaded with `load_state_dict(original.state_dict())`;
training refuses it (the optimizer would not step its weights).

Base and variant are one model: `Substitution.use("base" | "variant")` sets the modules
at the replaced paths, so both run with the same inputs, caches and optimizer state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from headroom.errors import UserError
from headroom.extract.capture import Construction, instances_of, match_constructions, positional_init
from headroom.profile.builders import meta_parameters
from headroom.pyfile import import_file


class CandidateError(UserError):
    """The candidate's own code failed (its constructor, its forward)."""


def load_candidate_class(path: Path) -> type:
    """The `ModelNew` class of a candidate file (imported; errors as one line)."""
    try:
        mod = import_file(path, "candidate")
    except UserError:
        raise
    except BaseException as e:  # noqa: BLE001 - anything the file does on import is the candidate's fault
        raise CandidateError(f"{path}: the candidate fails to import: {type(e).__name__}: {e}") from None
    cls = getattr(mod, "ModelNew", None)
    if not isinstance(cls, type):
        raise UserError(f"{path}: defines no class ModelNew")
    return cls


def _set_child(root: Any, path: str, module: Any) -> None:
    parent, _, leaf = path.rpartition(".")
    owner = root.get_submodule(parent) if parent else root
    setattr(owner, leaf, module)


def _owner(module: Any, name: str) -> tuple[Any, str]:
    parent, _, leaf = name.rpartition(".")
    return (module.get_submodule(parent) if parent else module), leaf


def _state_fits(new: Any, orig: Any) -> tuple[bool, str]:
    want = orig.state_dict()
    have = new.state_dict()
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want]
    shapes = [k for k in want if k in have and tuple(want[k].shape) != tuple(have[k].shape)]
    if not (missing or extra or shapes):
        return True, ""
    parts = []
    if missing:
        parts.append(f"missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    if extra:
        parts.append(f"unexpected {', '.join(extra[:3])}{' ...' if len(extra) > 3 else ''}")
    for k in shapes[:2]:
        parts.append(f"{k}: {tuple(have[k].shape)} vs {tuple(want[k].shape)}")
    return False, "; ".join(parts)


def _tie(new: Any, orig: Any, device: Any) -> None:
    """Make `new`'s parameters and persistent buffers the original's tensors; move the rest to `device`."""
    params = dict(orig.named_parameters(remove_duplicate=False))
    persistent = set(orig.state_dict())
    buffers = {n: b for n, b in orig.named_buffers(remove_duplicate=False) if n in persistent}
    for name, _ in list(new.named_parameters(remove_duplicate=False)):
        owner, leaf = _owner(new, name)
        owner._parameters[leaf] = params[name]
    for name, b in list(new.named_buffers(remove_duplicate=False)):
        owner, leaf = _owner(new, name)
        owner._buffers[leaf] = buffers[name] if name in buffers else b.to(device)


@dataclass(frozen=True)
class ReplaceSpec:
    """One `--replace CLASS=CANDIDATE.py` as loaded: the class as the user named it, the class, the candidate
    file and its `ModelNew`."""

    module: str
    cls: type
    candidate: Path
    new_cls: type


@dataclass
class Replacement:
    """One `--replace CLASS=CANDIDATE.py`: the instances, their originals and their candidates."""

    module: str  # CLASS as the user gave it
    cls: type
    candidate: Path
    new_cls: type
    paths: list[str]
    originals: list[Any] = field(default_factory=list)
    candidates: list[Any] = field(default_factory=list)
    tied: bool = True
    calls_per_step: int = 0

    JSON_KEYS: ClassVar[tuple[str | tuple[str, str], ...]] = (
        "module",
        ("class", "class_name"),
        "candidate",
        "instances",
        "paths",
        "tied",
        "calls_per_step",
    )

    @property
    def class_name(self) -> str:
        return f"{self.cls.__module__}.{self.cls.__qualname__}"

    @property
    def instances(self) -> int:
        return len(self.paths)


def build_candidate(
    new_cls: type, init: list[Any], orig: Any, device: Any, train: bool, where: str
) -> tuple[Any, bool]:
    """(ModelNew(*init) holding `orig`'s weights, whether they are tied to the originals)."""
    import torch

    new = None
    try:
        with meta_parameters():
            new = new_cls(*init)
    except Exception:  # noqa: BLE001 - some constructors need real parameters; built for real below
        new = None
    if new is not None and isinstance(new, torch.nn.Module):
        fits, why = _state_fits(new, orig)
        if fits:
            _tie(new, orig, device)
            new.train(orig.training)
            return new, True
    try:
        with torch.device(device):
            new = new_cls(*init)
    except Exception as e:  # noqa: BLE001
        raise CandidateError(f"{where}: ModelNew(*get_init_inputs()) failed: {type(e).__name__}: {e}") from None
    if not isinstance(new, torch.nn.Module):
        raise UserError(f"{where}: ModelNew(...) is not an nn.Module")
    fits, why = _state_fits(new, orig)
    if train:
        raise UserError(
            f"{where}: ModelNew's state_dict does not fit {type(orig).__name__}'s ({why}); a training "
            f"run needs the same parameter names and shapes (the optimizer steps the original's)"
        )
    try:
        new.load_state_dict(orig.state_dict(), strict=True)
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()
        detail = why or (first[1].strip() if len(first) > 1 else first[0] if first else type(e).__name__)
        raise UserError(f"{where}: ModelNew's state_dict does not fit {type(orig).__name__}'s ({detail})") from None
    new = new.to(device)
    new.train(orig.training)
    return new, False


class Substitution:
    """The replaced paths of one model, switchable between the originals and the candidates."""

    def __init__(self, root: Any, replacements: list[Replacement]):
        self.root = root
        self.replacements = replacements
        self.active = "base"

    def use(self, side: str) -> None:
        if side not in ("base", "variant"):
            raise ValueError(side)
        if side == self.active:
            return
        for r in self.replacements:
            mods = r.candidates if side == "variant" else r.originals
            for path, m in zip(r.paths, mods):
                _set_child(self.root, path, m)
        self.active = side

    @property
    def paths(self) -> list[str]:
        return [p for r in self.replacements for p in r.paths]

    def active_modules(self) -> list[Any]:
        return [m for r in self.replacements for m in (r.candidates if self.active == "variant" else r.originals)]


def substitute(
    root: Any, specs: list[ReplaceSpec], built: dict[type, dict[int, Construction]], device: Any, train: bool
) -> Substitution:
    """Candidates for every instance of each class (constructed, weights tied), not yet active."""
    reps = []
    taken: set[str] = set()
    for spec in specs:
        name, cls, cand_path, new_cls = spec.module, spec.cls, spec.candidate, spec.new_cls
        inst = instances_of(root, cls)
        if not inst:
            raise UserError(f"{cls.__name__} is not in the model the workload built")
        overlap = [p for p, _ in inst if any(p == t or p.startswith(t + ".") or t.startswith(p + ".") for t in taken)]
        if overlap:
            raise UserError(f"--replace {name}: {overlap[0]} is inside (or holds) a module another --replace replaces")
        cons = match_constructions(cls, inst, built[cls])
        rep = Replacement(name, cls, cand_path, new_cls, [p for p, _ in inst])
        for path, orig in inst:
            init = positional_init(cls, cons[path])
            new, tied = build_candidate(new_cls, init, orig, device, train, f"{cand_path.name} for {path}")
            rep.originals.append(orig)
            rep.candidates.append(new)
            rep.tied = rep.tied and tied
        taken.update(rep.paths)
        reps.append(rep)
    return Substitution(root, reps)
