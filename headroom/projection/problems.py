"""The problem map: a benchmark problem's name -> the selectors for the kernel time it stands for.

The shipped map is `headroom/data/problems.toml`; a user's file in the same format
adds problems or replaces same-named ones.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from headroom.datafiles import read_toml, shipped
from headroom.errors import UserError
from headroom.projection.selectors import Selector, parse_selector


def _norm_name(name: str) -> str:
    n = name.strip()
    if n.endswith(".py"):
        n = n[:-3]
    return n.lower().rstrip("_")


@dataclass(frozen=True)
class MappedProblem:
    """A benchmark problem in the problem map: the selectors for the kernel time it stands for."""

    name: str
    suite: str
    selectors: tuple[Selector, ...]
    note: str = ""


class ProblemMap:
    """Benchmark problem name -> the selectors for the kernel time it stands for."""

    def __init__(self, problems: Iterable[MappedProblem], source: str = "") -> None:
        self.problems: dict[str, MappedProblem] = {}
        self.source = source
        self._by_norm: dict[str, str] = {}
        self._by_bare: dict[str, list[str]] = {}
        for p in problems:
            self.problems[p.name] = p
            self._by_norm[_norm_name(p.name)] = p.name
            bare = re.sub(r"^\d+_", "", _norm_name(p.name))
            self._by_bare.setdefault(bare, []).append(p.name)

    def __contains__(self, name: str) -> bool:
        return self.find(name) is not None

    def __len__(self) -> int:
        return len(self.problems)

    def find(self, name: str) -> MappedProblem | None:
        """Exact name, then case/``.py``/trailing-underscore-insensitive, then the name without its number if unique."""
        if name in self.problems:
            return self.problems[name]
        key = _norm_name(name)
        if key in self._by_norm:
            return self.problems[self._by_norm[key]]
        bare = self._by_bare.get(re.sub(r"^\d+_", "", key), [])
        if len(bare) == 1 and not re.match(r"^\d+_", key):
            return self.problems[bare[0]]
        return None

    def get(self, name: str) -> MappedProblem:
        p = self.find(name)
        if p is None:
            close = difflib.get_close_matches(name, list(self.problems), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UserError(f"unknown problem {name!r} (not in {self.source or 'the problem mapping'}){hint}")
        return p

    def suites(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for p in self.problems.values():
            out.setdefault(p.suite, []).append(p.name)
        return out


def parse_problem_map(doc: dict, source: str) -> ProblemMap:
    """A problem map from a parsed TOML document of [problem."NAME"] tables (select, suite, note)."""
    table = doc.get("problem")
    if not isinstance(table, dict) or not table:
        raise UserError(f'{source}: expected [problem."NAME"] tables')
    out = []
    for name, body in table.items():
        if not isinstance(body, dict):
            raise UserError(f"{source}: problem {name!r} must be a table")
        sel = body.get("select")
        if isinstance(sel, str):
            sel = [sel]
        if not isinstance(sel, list) or not sel or not all(isinstance(s, str) for s in sel):
            raise UserError(f'{source}: problem {name!r} needs select = ["KIND:PATTERN", ...]')
        sels = []
        for s in sel:
            parsed = parse_selector(s)
            if any(a.field == "problem" for a in parsed.atoms):
                raise UserError(f"{source}: problem {name!r}: a problem cannot select another problem")
            sels.append(parsed)
        out.append(
            MappedProblem(
                name=name, suite=str(body.get("suite", "")), selectors=tuple(sels), note=str(body.get("note", ""))
            )
        )
    return ProblemMap(out, source)


@lru_cache(maxsize=1)
def _default_problems() -> ProblemMap:
    return parse_problem_map(shipped("problems.toml"), "headroom/data/problems.toml")


def load_problems(path: str | os.PathLike[str] | None = None) -> ProblemMap:
    """The shipped mapping; a user's file (same format) adds problems or replaces same-named ones."""
    base = _default_problems()
    if path is None:
        return base
    path = Path(path)
    user = parse_problem_map(read_toml(path), str(path))
    merged = dict(base.problems)
    merged.update(user.problems)
    return ProblemMap(merged.values(), f"{base.source} + {path}")
