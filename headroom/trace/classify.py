"""Sort GPU activities into categories with ordered rules, and mark what is addressable.

Rules and the addressable policy are data (`headroom/data/rules.toml`,
`headroom/data/policy.toml`); a user's `--rules`/`--policy` files extend or
override them. Matching runs once per distinct (kind, name, op, top_op,
annotation, module) combination, not once per event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from headroom.datafiles import read_toml, shipped
from headroom.errors import UserError


OTHER = "other"
_FIELDS = ("kernel", "op", "annotation", "module")
_KINDS = {"kernel", "memcpy", "memset", "cpu_op"}


@dataclass(frozen=True)
class Rule:
    category: str
    kind: str | None = None
    kernel: re.Pattern | None = None
    op: re.Pattern | None = None
    annotation: re.Pattern | None = None
    module: re.Pattern | None = None
    why: str = ""

    def matches(self, kind: str, name: str, op: str, top_op: str, annotation: str, module: str) -> bool:
        if self.kind is not None and self.kind != kind:
            return False
        if self.kernel is not None and not self.kernel.search(name):
            return False
        if self.op is not None and not (self.op.search(op) or self.op.search(top_op)):
            return False
        if self.annotation is not None and not self.annotation.search(annotation):
            return False
        if self.module is not None and not self.module.search(module):
            return False
        return True


@dataclass(frozen=True)
class Policy:
    addressable: dict[str, bool]

    def is_addressable(self, category: str) -> bool:
        # A category the policy does not name is something a new kernel could replace.
        return self.addressable.get(category, True)


def _read_toml(path: Path | None, default: str) -> tuple[dict, str]:
    if path is None:
        return shipped(default), f"headroom/data/{default}"
    return read_toml(path), str(path)


def _compile_rules(doc: dict, source: str) -> list[Rule]:
    rules = doc.get("rule")
    if not isinstance(rules, list):
        raise UserError(f"{source}: expected [[rule]] tables")
    out = []
    for i, r in enumerate(rules, 1):
        if not isinstance(r, dict) or not isinstance(r.get("category"), str) or not r["category"]:
            raise UserError(f"{source}: rule {i} has no 'category'")
        unknown = set(r) - {"category", "kind", "why", *_FIELDS}
        if unknown:
            raise UserError(f"{source}: rule {i} has unknown field(s) {sorted(unknown)}")
        kind = r.get("kind")
        if kind is not None and kind not in _KINDS:
            raise UserError(f"{source}: rule {i}: kind must be one of {sorted(_KINDS)}, got {kind!r}")
        if kind is None and not any(f in r for f in _FIELDS):
            raise UserError(f"{source}: rule {i} matches everything (give kind, kernel, op, annotation or module)")
        pats = {}
        for f in _FIELDS:
            if f in r:
                try:
                    pats[f] = re.compile(r[f], re.IGNORECASE)
                except (re.error, TypeError) as e:
                    raise UserError(f"{source}: rule {i}: bad {f} regex {r[f]!r} ({e})") from None
        out.append(Rule(category=r["category"], kind=kind, why=r.get("why", ""), **pats))
    return out


def category_group(name: str) -> tuple[str, ...]:
    """A named group of categories (headroom/data/categories.toml): vendor, gemm_attention, memory, ..."""
    return tuple(shipped("categories.toml")["groups"][name])


def load_rules(extra: Path | str | None = None) -> list[Rule]:
    """The shipped rules, with a user's rules (if any) tried first."""
    rules = _compile_rules(*_read_toml(None, "rules.toml"))
    if extra is not None:
        rules = _compile_rules(*_read_toml(Path(extra), "")) + rules
    return rules


def load_policy(override: Path | str | None = None) -> Policy:
    doc, source = _read_toml(None, "policy.toml")
    table = dict(doc["addressable"])
    if override is not None:
        user, source = _read_toml(Path(override), "")
        if not isinstance(user.get("addressable"), dict):
            raise UserError(f"{source}: expected an [addressable] table")
        for k, v in user["addressable"].items():
            if not isinstance(v, bool):
                raise UserError(f"{source}: addressable.{k} must be true or false, got {v!r}")
        table.update(user["addressable"])
    return Policy(addressable=table)


def classify_one(rules: list[Rule], kind: str, name: str, op: str = "", top_op: str = "",
                 annotation: str = "", module: str = "") -> str:
    for rule in rules:
        if rule.matches(kind, name, op, top_op, annotation, module):
            return rule.category
    return OTHER


def classify_kernels(events: pd.DataFrame, rules: list[Rule], policy: Policy) -> pd.DataFrame:
    """Add `category` and `addressable` columns to attributed events."""
    cols = ["kind", "name", "op", "top_op", "annotation", "module"]
    out = events.copy()
    if len(out) == 0:
        out["category"] = pd.Series(dtype=object)
        out["addressable"] = pd.Series(dtype=bool)
        return out
    # Factorise each column once, then find the distinct combinations numerically
    # (kernel names are long: hashing them more than once dominates big traces).
    col_codes, col_uniques = zip(*(pd.factorize(out[c], sort=False) for c in cols))
    sizes = [max(len(u), 1) for u in col_uniques]
    key = np.zeros(len(out), dtype=np.int64)
    for c, size in zip(col_codes, sizes):  # mixed-radix: one int64 per combination
        key = key * size + c
    codes, first = pd.factorize(key, sort=False)
    # Decode each distinct key back into its column codes.
    combos = []
    for k in first.tolist():
        row = []
        for size in reversed(sizes):
            row.append(k % size)
            k //= size
        combos.append(row[::-1])
    cats = np.array([classify_one(rules, *(str(col_uniques[j][k]) for j, k in enumerate(row))) for row in combos],
                    dtype=object)
    out["category"] = cats[codes]
    addr = {c: policy.is_addressable(c) for c in set(cats)}
    out["addressable"] = np.array([addr[c] for c in cats], dtype=bool)[codes]
    return out
