"""Matching selectors and speedup entries against the events of an analysed trace."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from headroom.errors import UserError, unknown_name
from headroom.jsonio import OMIT_NONE
from headroom.projection.problems import ProblemMap, load_problems
from headroom.projection.selectors import Atom, Selector, parse_selector
from headroom.projection.speedups import Speedup
from headroom.regex import Pattern, compile_user_regex
from headroom.trace.classify import known_categories
from headroom.trace.intervals import codes_and_texts
from headroom.trace.modules import STACK_SEP
from headroom.trace.phases import event_phase

_GLOB_CHARS = set("*?[")


def label_predicate(kind: str, pattern: str, where: str = "selector"):
    """How an atom of `kind` matches one label: exact or glob for category/op names, regex (RE2 search,
    case-insensitive, never the empty label; headroom/regex.py) for kernel names, module paths and
    annotations. `where` names the pattern's origin in the error a bad regex raises."""
    if kind in ("kernel", "module", "annotation"):
        rx = compile_user_regex(pattern, where)
        return lambda v: v != "" and rx.search(v) is not None
    if _GLOB_CHARS & set(pattern):
        return lambda v: fnmatch.fnmatchcase(v, pattern)
    return lambda v: v == pattern


class _Matcher:
    """Evaluates atoms over an events DataFrame, once per distinct column value."""

    def __init__(self, events: pd.DataFrame, problems: ProblemMap) -> None:
        self.events = events
        self.problems = problems
        self._codes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.n = len(events)

    def _col(self, col: str) -> tuple[np.ndarray, np.ndarray]:
        """Codes into the texts of the column's distinct values, a missing value (or column) reading as ""
        (its code is the last). One factorization per column (`codes_and_texts`: a category's own codes,
        long kernel names by identity)."""
        if col not in self._codes:
            codes, texts = (
                codes_and_texts(self.events[col])
                if col in self.events.columns
                else (np.full(self.n, -1, dtype=np.int64), [])
            )
            self._codes[col] = (np.where(codes < 0, len(texts), codes), np.array(texts + [""], dtype=object))
        return self._codes[col]

    def _by_value(self, col: str, pred) -> np.ndarray:
        codes, uniques = self._col(col)
        if self.n == 0:
            return np.zeros(0, dtype=bool)
        hit = np.fromiter((bool(pred(u)) for u in uniques), dtype=bool, count=len(uniques))
        return hit[codes]

    def atom(self, a: Atom) -> np.ndarray:
        m = self._atom(a)
        return ~m if a.negate else m

    def _atom(self, a: Atom) -> np.ndarray:
        p = a.pattern
        exact = label_predicate("op", p)
        if a.field == "category":
            if p == "addressable":
                if "addressable" not in self.events.columns:
                    return np.zeros(self.n, dtype=bool)
                return self.events["addressable"].fillna(False).to_numpy(dtype=bool)
            if p in ("all", "*"):
                return np.ones(self.n, dtype=bool)
            self._check_category(p)
            return self._by_value("category", exact)
        if a.field == "op":
            return self._by_value("op", exact) | self._by_value("top_op", exact)
        if a.field == "kind":
            return self._by_value("kind", lambda v: v == p)
        if a.field == "phase":
            return self.phases() == p
        if a.field == "module":
            return self._module(compile_user_regex(p, f"selector {a}"))
        if a.field in ("kernel", "annotation"):
            col = "name" if a.field == "kernel" else a.field
            return self._by_value(col, label_predicate(a.field, p, f"selector {a}"))
        if a.field == "problem":
            prob = self.problems.get(p)
            out = np.zeros(self.n, dtype=bool)
            for sel in prob.selectors:
                out |= self.selector(sel)
            return out
        raise AssertionError(a.field)

    def _module(self, rx: Pattern) -> np.ndarray:
        """Events inside a module (at any depth) whose path or class matches: the innermost path
        and each path above it, the innermost class and each class above it."""
        cols = [c for c in ("module", "module_stack") if c in self.events.columns]
        if not cols or self.n == 0:
            return np.zeros(self.n, dtype=bool)
        keys = self.events[cols].astype(object).where(self.events[cols].notna(), "").astype(str)
        codes, uniq = pd.MultiIndex.from_frame(keys).factorize() if len(cols) > 1 else pd.factorize(keys[cols[0]])
        hit = np.zeros(len(uniq), dtype=bool)
        for i, u in enumerate(uniq):
            path, stack = u if len(cols) > 1 else (u, "")
            parts = path.split(".") if path else []
            names = [".".join(parts[:k]) for k in range(1, len(parts) + 1)]
            names += [t for t in stack.split(STACK_SEP) if t]
            hit[i] = any(rx.search(x) is not None for x in names)
        return hit[codes]

    def _check_category(self, p: str) -> None:
        """A category name (or glob) that no classification can produce is a typo, not "no match"."""
        known = known_categories()
        if "category" in self.events.columns:
            codes, texts = self._col("category")
            present = np.unique(codes)  # a category column's unused categories are not among its values
            known |= set(texts[present[present < len(texts) - 1]].tolist())  # (the last text: a missing value)
        if _GLOB_CHARS & set(p):
            if not any(fnmatch.fnmatchcase(c, p) for c in known):
                raise UserError(f"selector category:{p}: matches no category (categories: {', '.join(sorted(known))})")
        elif p not in known:
            raise unknown_name("category", p, known | {"addressable", "all"}, f"selector category:{p}")

    def phases(self) -> np.ndarray:
        if not hasattr(self, "_phases") and "phase" in self.events.columns:
            self._phases = self.events["phase"].astype(str).to_numpy(dtype=object)
        if not hasattr(self, "_phases"):
            cols = [c for c in ("op", "top_op", "annotation") if c in self.events.columns]
            if not cols or self.n == 0:
                self._phases = np.full(self.n, "forward", dtype=object)
            else:
                keys = self.events[cols].astype(object).where(self.events[cols].notna(), "").astype(str)
                codes, uniq = pd.MultiIndex.from_frame(keys).factorize()
                lab = np.array([event_phase(*u) for u in uniq], dtype=object)
                self._phases = lab[codes]
        return self._phases

    def selector(self, sel: Selector) -> np.ndarray:
        out = np.ones(self.n, dtype=bool)
        for a in sel.atoms:
            out &= self.atom(a)
        return out


def select(events: pd.DataFrame, selector: str | Selector, problems: ProblemMap | None = None) -> np.ndarray:
    """Boolean mask of the events a selector picks."""
    sel = parse_selector(selector) if isinstance(selector, str) else selector
    return _Matcher(events, problems or load_problems()).selector(sel)


@dataclass
class EntryMatch:
    entry: Speedup
    mask: np.ndarray  # every event the selector picks
    applied: np.ndarray  # the events that take this entry's factor (after overlaps)
    kernels: int
    us: float  # sum of durations of the picked events
    wall_us: float  # their share of busy time
    addressable_us: float
    applied_kernels: int
    applied_us: float
    applied_wall_us: float
    top: list[tuple[str, float]]  # the picked kernels with the most time


@dataclass
class TopKernel:
    name: str
    us: float


@dataclass(kw_only=True)
class EntryResult:
    """One speedup entry of a projection: the entry as given, what its selector picked in the trace (all
    the events it names; `applied_*`: those that take its factor after overlaps), and, for an entry that
    says how many kernels each call launches (or in a cpu-ops trace), its calls on the CPU side (`cpu`)."""

    selector: str
    speedup: float
    launches: int | None
    verified: bool | None
    source: str
    call_us: float | None = field(default=None, metadata=OMIT_NONE)
    syncs: float | None = field(default=None, metadata=OMIT_NONE)
    kernels: int
    us: float
    wall_us: float
    addressable_us: float
    applied_kernels: int
    applied_us: float
    applied_wall_us: float
    top_kernels: list[TopKernel]
    cpu: dict[str, Any] | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def of(cls, m: EntryMatch) -> EntryResult:
        e = m.entry
        return cls(
            selector=str(e.selector),
            speedup=e.speedup,
            launches=e.launches,
            verified=e.verified,
            source=e.source,
            call_us=e.call_us,
            syncs=e.syncs,
            kernels=m.kernels,
            us=m.us,
            wall_us=m.wall_us,
            addressable_us=m.addressable_us,
            applied_kernels=m.applied_kernels,
            applied_us=m.applied_us,
            applied_wall_us=m.applied_wall_us,
            top_kernels=[TopKernel(n, u) for n, u in m.top],
        )


@dataclass
class Resolution:
    """Per-event speedup factors (1.0 where nothing applies) and what each entry matched."""

    factors: np.ndarray
    matches: list[EntryMatch]
    warnings: list[str]

    @property
    def selected(self) -> np.ndarray:
        return self.factors != 1.0

    @property
    def results(self) -> list[EntryResult]:
        """What each entry matched, as `project --json` writes it."""
        return [EntryResult.of(m) for m in self.matches]


def _durations(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    dur = events["dur"].to_numpy(dtype=float) if "dur" in events.columns else np.zeros(len(events))
    wall = events["wall_us"].to_numpy(dtype=float) if "wall_us" in events.columns else dur
    return dur, wall


def resolve(
    entries: list[Speedup], events: pd.DataFrame, problems: ProblemMap | None = None, strict: bool = False
) -> Resolution:
    """Match entries against events. Overlaps: the first entry (in the order given) wins, with a warning.

    Entries that match nothing, overlaps and duplicate selectors are warnings
    (UserError with ``strict``). Unknown problem names are always errors.
    """
    problems = problems or load_problems()
    m = _Matcher(events, problems)
    n = len(events)
    factors = np.ones(n, dtype=float)
    owner = np.full(n, -1, dtype=np.int64)
    dur, wall = _durations(events)
    addr = (
        events["addressable"].fillna(False).to_numpy(dtype=bool)
        if "addressable" in events.columns
        else np.zeros(n, dtype=bool)
    )
    names = events["name"].to_numpy(dtype=object) if "name" in events.columns else np.full(n, "", dtype=object)
    warnings: list[str] = []
    matches: list[EntryMatch] = []
    seen: dict[str, int] = {}
    for i, e in enumerate(entries):
        key = str(e.selector)
        if key in seen:
            prev = entries[seen[key]]
            msg = f"{e.label} ({e.source}) repeats the selector of {prev.label} ({prev.source})" + (
                "" if prev.speedup == e.speedup else f"; using the first, {prev.speedup:g}"
            )
            warnings.append(msg)
        else:
            seen[key] = i
        skipped = False
        try:
            mask = m.selector(e.selector)
        except UserError as err:
            if not e.verify_result:
                raise
            # A verified result for a problem the mapping does not know: say so, use nothing.
            warnings.append(f"{e.label} ({e.source}): {err}; skipped")
            mask = np.zeros(n, dtype=bool)
            skipped = True
        free = mask & (owner < 0)
        taken = mask & (owner >= 0)
        if not mask.any() and not skipped:
            warnings.append(f"{e.label} ({e.source}) matches no kernel in this trace")
        elif taken.any():
            for j in np.unique(owner[taken]):
                both = taken & (owner == j)
                first = entries[j]
                warnings.append(
                    f"{e.label} overlaps {first.label} on {int(both.sum())} kernel(s) "
                    f"({dur[both].sum():.1f} us); they keep the first entry's factor {first.speedup:g}"
                )
        if e.speedup < 1.0 and mask.any():
            warnings.append(f"{e.label} ({e.source}) is a slowdown (factor < 1): its kernels get slower")
        factors[free] = e.speedup
        owner[free] = i
        top: list[tuple[str, float]] = []
        if mask.any():
            s = pd.Series(dur[mask]).groupby(names[mask]).sum().sort_values(ascending=False).head(3)
            top = [(str(k), float(v)) for k, v in s.items()]
        matches.append(
            EntryMatch(
                entry=e,
                mask=mask,
                applied=free,
                kernels=int(mask.sum()),
                us=float(dur[mask].sum()),
                wall_us=float(wall[mask].sum()),
                addressable_us=float(dur[mask & addr].sum()),
                applied_kernels=int(free.sum()),
                applied_us=float(dur[free].sum()),
                applied_wall_us=float(wall[free].sum()),
                top=top,
            )
        )
    if strict and warnings:
        raise UserError(
            f"{warnings[0]} (strict mode{'; ' + str(len(warnings) - 1) + ' more' if len(warnings) > 1 else ''})"
        )
    return Resolution(factors, matches, warnings)
