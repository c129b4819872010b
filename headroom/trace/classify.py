"""Sort GPU activities into categories with ordered rules, and mark what is addressable.

Rules and the addressable policy are data (`headroom/data/rules.toml`,
`headroom/data/policy.toml`); a user's `--rules`/`--policy` files extend or
override them. Their regexes are RE2 (linear time: `headroom.regex`); category
names are case-insensitive and checked, so a typo is an error, not a silently
addressable category. Matching runs once per distinct (kind, name, op, top_op,
annotation, module) combination, not once per event.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from headroom.datafiles import read_toml, shipped
from headroom.errors import UserError, did_you_mean, unknown_name
from headroom.regex import Pattern, compile_user_regex

if TYPE_CHECKING:
    import pandas as pd

OTHER = "other"
_FIELDS = ("kernel", "op", "annotation", "module")
_KINDS = {"kernel", "memcpy", "memset", "cpu_op"}


@dataclass(frozen=True)
class Rule:
    category: str
    kind: str | None = None
    kernel: Pattern | None = None
    op: Pattern | None = None
    annotation: Pattern | None = None
    module: Pattern | None = None
    why: str = ""

    def matches(
        self,
        kind: str,
        name: str,
        op: str,
        top_op: str,
        annotation: str,
        module: str,
        found: Callable[[Pattern, str], bool] | None = None,
    ) -> bool:
        """Whether the rule matches; `found(pattern, text)` answers each search (a memo: `SearchMemo`)."""
        search = found or _search
        if self.kind is not None and self.kind != kind:
            return False
        if self.kernel is not None and not search(self.kernel, name):
            return False
        if self.op is not None and not (search(self.op, op) or search(self.op, top_op)):
            return False
        if self.annotation is not None and not search(self.annotation, annotation):
            return False
        if self.module is not None and not search(self.module, module):
            return False
        return True


def _search(pattern: Pattern, text: str) -> bool:
    return pattern.search(text) is not None


class SearchMemo:
    """Each (pattern, text) searched once: a trace's distinct combinations share their texts (the training
    shape: 25,876 searches of 1,670 distinct pairs)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, str], bool] = {}
        self._patterns: dict[int, Pattern] = {}  # kept alive: their ids key the memo

    def __call__(self, pattern: Pattern, text: str) -> bool:
        key = (id(pattern), text)
        hit = self._seen.get(key)
        if hit is None:
            hit = self._seen[key] = pattern.search(text) is not None
            self._patterns[id(pattern)] = pattern
        return hit


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


def _rule_categories(doc: dict) -> set[str]:
    rules = doc.get("rule")
    if not isinstance(rules, list):
        return set()
    return {r["category"].lower() for r in rules if isinstance(r, dict) and isinstance(r.get("category"), str)}


def _compile_rules(doc: dict, source: str, known: set[str]) -> list[Rule]:
    unknown_top = set(doc) - {"rule"}
    if unknown_top:
        name = sorted(unknown_top)[0]
        raise UserError(
            f"{source}: unknown top-level key {name!r}{did_you_mean(name, ['rule'])}; rules are [[rule]] tables"
        )
    rules = doc.get("rule")
    if not isinstance(rules, list):
        raise UserError(f"{source}: expected [[rule]] tables")
    fields = {"category", "kind", "why", *_FIELDS}
    out = []
    for i, r in enumerate(rules, 1):
        where = f"{source}: rule {i}"
        if not isinstance(r, dict):
            raise UserError(f"{where}: expected a [[rule]] table")
        for name in r:
            if name not in fields:
                raise unknown_name("field", name, fields, where)
        category = r.get("category")
        if not isinstance(category, str) or not category.strip():
            raise UserError(f"{where} has no 'category' (a string)")
        category = category.strip().lower()
        if category not in known:
            raise UserError(
                f"{unknown_name('category', category, known, where)}; a new category "
                f"must also be given in a --policy file (addressable or not)"
            )
        kind = r.get("kind")
        if kind is not None:
            if not isinstance(kind, str) or kind.lower() not in _KINDS:
                raise unknown_name("kind", str(kind), _KINDS, where)
            kind = kind.lower()
        if kind is None and not any(f in r for f in _FIELDS):
            raise UserError(f"{where} matches everything (give kind, kernel, op, annotation or module)")
        if not isinstance(r.get("why", ""), str):
            raise UserError(f"{where}: why must be a string")
        pats = {f: compile_user_regex(r[f], f"{where}: {f}") for f in _FIELDS if f in r}
        out.append(Rule(category=category, kind=kind, why=r.get("why", ""), **pats))
    return out


def _policy_table(doc: dict, source: str, known: set[str]) -> dict[str, bool]:
    unknown_top = set(doc) - {"addressable"}
    if unknown_top:
        name = sorted(unknown_top)[0]
        raise UserError(f"{source}: unknown top-level key {name!r}{did_you_mean(name, ['addressable'])}")
    table = doc.get("addressable")
    if not isinstance(table, dict):
        raise UserError(f"{source}: expected an [addressable] table (category = true/false)")
    out: dict[str, bool] = {}
    for k, v in table.items():
        name = k.strip().lower()
        if name not in known:
            raise UserError(
                f"{unknown_name('category', k, known, source + ': [addressable]')}; a new "
                f"category needs a rule in a --rules file"
            )
        if not isinstance(v, bool):
            raise UserError(f"{source}: addressable.{k} must be true or false, got {v!r}")
        if name in out:
            raise UserError(f"{source}: category {name!r} is given twice (names are case-insensitive)")
        out[name] = v
    return out


@lru_cache(maxsize=1)
def _shipped_categories() -> frozenset[str]:
    doc, _ = _read_toml(None, "policy.toml")
    return frozenset(set(doc["addressable"]) | _rule_categories(_read_toml(None, "rules.toml")[0]) | {OTHER})


def known_categories() -> set[str]:
    """The categories of the shipped rules and policy (lower case)."""
    return set(_shipped_categories())


def load_classifier(
    rules: str | os.PathLike[str] | None = None, policy: str | os.PathLike[str] | None = None
) -> tuple[list[Rule], Policy]:
    """The shipped rules and policy, with a user's rules (tried first) and policy overrides.

    Every category a file names must be a shipped one, or be given in both files: a rule
    that produces a new category and the policy entry that says whether it is addressable.
    """
    shipped = known_categories()
    user_rules = _read_toml(Path(rules), "") if rules is not None else None
    user_policy = _read_toml(Path(policy), "") if policy is not None else None
    rule_cats = _rule_categories(user_rules[0]) if user_rules else set()
    policy_cats = (
        {str(k).strip().lower() for k in user_policy[0]["addressable"]}
        if user_policy and isinstance(user_policy[0].get("addressable"), dict)
        else set()
    )
    compiled = _compile_rules(*_read_toml(None, "rules.toml"), shipped)
    if user_rules:
        compiled = _compile_rules(*user_rules, shipped | policy_cats) + compiled
    table = _policy_table(*_read_toml(None, "policy.toml"), shipped)
    if user_policy:
        table.update(_policy_table(*user_policy, shipped | rule_cats))
    return compiled, Policy(addressable=table)


def category_group(name: str) -> tuple[str, ...]:
    """A named group of categories (headroom/data/categories.toml): vendor, gemm_attention, memory, ..."""
    return tuple(shipped("categories.toml")["groups"][name])


def load_rules(extra: Path | str | None = None) -> list[Rule]:
    """The shipped rules, with a user's rules (if any) tried first."""
    return load_classifier(rules=extra)[0]


def load_policy(override: Path | str | None = None) -> Policy:
    """The shipped addressable policy, with a user's overrides (if any)."""
    return load_classifier(policy=override)[1]


def classify_one(
    rules: list[Rule],
    kind: str,
    name: str,
    op: str = "",
    top_op: str = "",
    annotation: str = "",
    module: str = "",
    found: Callable[[Pattern, str], bool] | None = None,
) -> str:
    for rule in rules:
        if rule.matches(kind, name, op, top_op, annotation, module, found):
            return rule.category
    return OTHER


def classify_kernels(events: pd.DataFrame, rules: list[Rule], policy: Policy) -> pd.DataFrame:
    """Add `category` and `addressable` columns to attributed events."""
    # numpy and pandas here: loading the rules (a command's first step) imports neither, so a command that
    # prints a cached summary (headroom/report/summary.py) starts without them.
    import numpy as np
    import pandas as pd

    from headroom.trace.codes import factorized

    cols = ["kind", "name", "op", "top_op", "annotation", "module"]
    out = events.copy(deep=False)  # copy-on-write: the new columns are out's alone, no data copied
    if len(out) == 0:
        out["category"] = pd.Series(dtype=object)
        out["addressable"] = pd.Series(dtype=bool)
        return out
    # Factorise each column once, then find the distinct combinations numerically
    # (kernel names are long: hashing them more than once dominates big traces).
    col_codes, col_uniques = zip(*(factorized(out[c]) for c in cols))
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
    memo = SearchMemo()
    texts = [[str(col_uniques[j][k]) for j, k in enumerate(row)] for row in combos]
    cats = np.array([classify_one(rules, t[0], t[1], t[2], t[3], t[4], t[5], found=memo) for t in texts], dtype=object)
    out["category"] = cats[codes]
    addr = {c: policy.is_addressable(c) for c in set(cats)}
    out["addressable"] = np.array([addr[c] for c in cats], dtype=bool)[codes]
    return out
