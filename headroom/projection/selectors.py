"""Selectors: which GPU events of an analysed trace a speedup applies to.

Selector syntax (see docs/projection.md)::

    category:embedding          the classifier's category (exact, or a glob: category:norm*)
    category:addressable        every addressable event (policy.toml)
    op:aten::layer_norm         the innermost launching aten op OR the top-level op (exact or glob)
    kernel:^triton_             regex (RE2 search, case-insensitive) on the kernel name
    module:RMSNorm              regex on the nn.Module path (traces recorded with modules)
    annotation:interaction      regex on the innermost record_function / NVTX range
    kind:memcpy                 kernel | memcpy | memset
    phase:forward               forward | backward | optimizer (from the launching ops and ranges)
    problem:23_Softmax          a named benchmark problem (headroom/data/problems.toml)

Atoms combine with `` & `` (all must match) and negate with a leading ``!``:
``op:aten::mm & category:gemm``, ``category:elementwise & !module:RMSNorm``.
"""

from __future__ import annotations

from dataclasses import dataclass

from headroom.errors import UserError, unknown_name
from headroom.regex import compile_user_regex
from headroom.trace.phases import phase_names

# The event field an atom tests (the part before the colon).
FIELDS = ("category", "op", "kernel", "module", "annotation", "kind", "phase", "problem")
EVENT_KINDS = ("kernel", "memcpy", "memset", "cpu_op")


@dataclass(frozen=True)
class Atom:
    field: str
    pattern: str
    negate: bool = False

    def __str__(self) -> str:
        return f"{'!' if self.negate else ''}{self.field}:{self.pattern}"


@dataclass(frozen=True)
class Selector:
    """An AND of atoms, e.g. ``op:aten::mm & category:gemm``."""

    atoms: tuple[Atom, ...]

    def __str__(self) -> str:
        return " & ".join(str(a) for a in self.atoms)

    @property
    def text(self) -> str:
        return str(self)


def parse_selector(text: str) -> Selector:
    """Parse ``FIELD:PATTERN [& FIELD:PATTERN ...]``; raise UserError on bad input."""
    if not isinstance(text, str) or not text.strip():
        raise UserError("empty selector (expected KIND:PATTERN, e.g. category:embedding)")
    atoms = []
    for part in text.split(" & "):
        part = part.strip()
        negate = part.startswith("!")
        if negate:
            part = part[1:].strip()
        field, sep, pattern = part.partition(":")
        field = field.strip().lower()
        if not sep:
            raise UserError(f"bad selector {text!r}: expected KIND:PATTERN with KIND one of {', '.join(FIELDS)}")
        if field not in FIELDS:
            raise unknown_name("selector kind", field, FIELDS, f"bad selector {text!r}")
        if pattern == "":
            raise UserError(f"bad selector {text!r}: empty pattern after '{field}:'")
        if field not in ("kernel", "module", "annotation") and any(c in pattern for c in "=,"):
            raise UserError(
                f"bad selector {text!r}: {pattern!r} is no {field} name ('=' and ',' end a "
                f"selector: SELECTOR=FACTOR[,launches=N])"
            )
        if field in ("kernel", "module", "annotation"):
            compile_user_regex(pattern, f"bad selector {text!r}")
        if field in ("category", "kind", "phase"):
            pattern = pattern.strip().lower()  # names are case-insensitive
        if field == "kind" and pattern not in EVENT_KINDS:
            raise unknown_name("kind", pattern, EVENT_KINDS, f"bad selector {text!r}")
        if field == "phase" and pattern not in phase_names():
            raise unknown_name("phase", pattern, phase_names(), f"bad selector {text!r}")
        atoms.append(Atom(field, pattern, negate))
    if all(a.negate for a in atoms):
        raise UserError(f"bad selector {text!r}: needs at least one atom that is not negated")
    return Selector(tuple(atoms))
