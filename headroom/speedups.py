"""Speedup input: which kernel time gets faster, and by how much.

A *selector* picks GPU events of an analysed trace; a *speedup entry* pairs a
selector with a factor (> 0; 2.0 means the selected kernels take half the
time). Entries come from the command line (``--speedup SELECTOR=FACTOR``), from
a TOML/JSON/CSV file, or from the JSON that ``headroom verify`` writes.

Selector syntax (see docs/projection.md)::

    category:embedding          the classifier's category (exact, or a glob: category:norm*)
    category:addressable        every addressable event (policy.toml)
    op:aten::layer_norm         the innermost launching aten op OR the top-level op (exact or glob)
    kernel:^triton_             regex (re.search, case-insensitive) on the kernel name
    module:RMSNorm              regex on the nn.Module path (traces recorded with modules)
    annotation:interaction      regex on the innermost record_function / NVTX range
    kind:memcpy                 kernel | memcpy | memset
    phase:forward               forward | backward | optimizer (from the launching ops and ranges)
    problem:23_Softmax          a named benchmark problem (headroom/data/problems.toml)

Atoms combine with `` & `` (all must match) and negate with a leading ``!``:
``op:aten::mm & category:gemm``, ``category:elementwise & !module:RMSNorm``.

Nothing here guesses: an entry that selects nothing, two entries that select
the same kernels, and an invalid factor are reported (warnings, or errors with
``strict=True``; invalid factors are always errors).
"""

from __future__ import annotations

import csv
import difflib
import fnmatch
import io
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from headroom.errors import UserError

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

KINDS = ("category", "op", "kernel", "module", "annotation", "kind", "phase", "problem")
PHASES = ("forward", "backward", "optimizer")
# Where an event ran, from its launching ops and range: the optimizer step, the backward
# pass (autograd engine, *Backward nodes, *_backward ops, a "backward" range), else forward.
_OPTIMIZER_RX = re.compile(r"optimizer|^aten::_foreach_|^aten::_fused_(adam|adamw|sgd)|zero_grad", re.IGNORECASE)
_BACKWARD_RX = re.compile(r"backward|autograd::engine", re.IGNORECASE)
_GLOB_CHARS = set("*?[")
_SHORTHAND = ("category", "op", "kernel", "module", "annotation", "kind", "problem")
_ENTRY_KEYS = {"select", "speedup", "verified", "source", "note", *_SHORTHAND}


# --- selectors -----------------------------------------------------------------


@dataclass(frozen=True)
class Atom:
    kind: str
    pattern: str
    negate: bool = False

    def __str__(self) -> str:
        return f"{'!' if self.negate else ''}{self.kind}:{self.pattern}"


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
    """Parse ``kind:pattern [& kind:pattern ...]``; raise UserError on bad input."""
    if not isinstance(text, str) or not text.strip():
        raise UserError("empty selector (expected KIND:PATTERN, e.g. category:embedding)")
    atoms = []
    for part in text.split(" & "):
        part = part.strip()
        negate = part.startswith("!")
        if negate:
            part = part[1:].strip()
        kind, sep, pattern = part.partition(":")
        kind = kind.strip().lower()
        if not sep or kind not in KINDS:
            raise UserError(
                f"bad selector {text!r}: expected KIND:PATTERN with KIND one of {', '.join(KINDS)}")
        if pattern == "":
            raise UserError(f"bad selector {text!r}: empty pattern after '{kind}:'")
        if kind in ("kernel", "module", "annotation"):
            try:
                re.compile(pattern, re.IGNORECASE)
            except re.error as e:
                raise UserError(f"bad selector {text!r}: invalid regex ({e})") from None
        if kind == "kind" and pattern not in ("kernel", "memcpy", "memset", "cpu_op"):
            raise UserError(f"bad selector {text!r}: kind must be kernel, memcpy, memset or cpu_op")
        if kind == "phase" and pattern not in PHASES:
            raise UserError(f"bad selector {text!r}: phase must be {', '.join(PHASES)}")
        atoms.append(Atom(kind, pattern, negate))
    if all(a.negate for a in atoms):
        raise UserError(f"bad selector {text!r}: needs at least one atom that is not negated")
    return Selector(tuple(atoms))


# --- the problem mapping ----------------------------------------------------------


def _norm_name(name: str) -> str:
    n = name.strip()
    if n.endswith(".py"):
        n = n[:-3]
    return n.lower().rstrip("_")


@dataclass(frozen=True)
class Problem:
    name: str
    suite: str
    selectors: tuple[Selector, ...]
    note: str = ""


class ProblemMap:
    """Benchmark problem name -> the selectors for the kernel time it stands for."""

    def __init__(self, problems: Iterable[Problem], source: str = "") -> None:
        self.problems: dict[str, Problem] = {}
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

    def find(self, name: str) -> Problem | None:
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

    def get(self, name: str) -> Problem:
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


def _parse_problem_doc(doc: dict, source: str) -> ProblemMap:
    table = doc.get("problem")
    if not isinstance(table, dict) or not table:
        raise UserError(f"{source}: expected [problem.\"NAME\"] tables")
    out = []
    for name, body in table.items():
        if not isinstance(body, dict):
            raise UserError(f"{source}: problem {name!r} must be a table")
        sel = body.get("select")
        if isinstance(sel, str):
            sel = [sel]
        if not isinstance(sel, list) or not sel or not all(isinstance(s, str) for s in sel):
            raise UserError(f"{source}: problem {name!r} needs select = [\"KIND:PATTERN\", ...]")
        sels = []
        for s in sel:
            parsed = parse_selector(s)
            if any(a.kind == "problem" for a in parsed.atoms):
                raise UserError(f"{source}: problem {name!r}: a problem cannot select another problem")
            sels.append(parsed)
        out.append(Problem(name=name, suite=str(body.get("suite", "")), selectors=tuple(sels),
                           note=str(body.get("note", ""))))
    return ProblemMap(out, source)


@lru_cache(maxsize=1)
def _default_problems() -> ProblemMap:
    text = resources.files("headroom.data").joinpath("problems.toml").read_text()
    return _parse_problem_doc(tomllib.loads(text), "headroom/data/problems.toml")


def load_problems(path: str | Path | None = None) -> ProblemMap:
    """The shipped mapping; a user's file (same format) adds problems or replaces same-named ones."""
    base = _default_problems()
    if path is None:
        return base
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: invalid TOML ({e})") from None
    user = _parse_problem_doc(doc, str(path))
    merged = dict(base.problems)
    merged.update(user.problems)
    return ProblemMap(merged.values(), f"{base.source} + {path}")


# --- speedup entries ------------------------------------------------------------------


@dataclass(frozen=True)
class Speedup:
    selector: Selector
    speedup: float
    verified: bool | None = None
    source: str = ""
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.selector}={self.speedup:g}"

    def to_dict(self) -> dict[str, Any]:
        return {"selector": str(self.selector), "speedup": self.speedup,
                "verified": self.verified, "source": self.source}


def parse_factor(value: Any, where: str) -> float:
    """A speedup factor: a finite number > 0. Anything else is a UserError naming `where`."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise UserError(f"{where}: missing speedup value")
    if isinstance(value, bool):
        raise UserError(f"{where}: speedup must be a number, got {value!r}")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{where}: speedup must be a number, got {value!r}") from None
    if math.isnan(f):
        raise UserError(f"{where}: speedup is NaN")
    if math.isinf(f):
        raise UserError(f"{where}: speedup must be finite (the zero-time bound is always reported)")
    if f <= 0:
        raise UserError(f"{where}: speedup must be > 0, got {f:g}")
    return f


def _parse_bool(value: Any, where: str) -> bool | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("true", "yes", "1", "y"):
        return True
    if s in ("false", "no", "0", "n"):
        return False
    raise UserError(f"{where}: verified must be true or false, got {value!r}")


def parse_cli_speedup(text: str) -> Speedup:
    """``SELECTOR=FACTOR`` as given to ``--speedup`` (split on the last '=')."""
    sel, sep, value = text.rpartition("=")
    if not sep or not sel.strip():
        raise UserError(f"--speedup {text!r}: expected SELECTOR=FACTOR, e.g. category:embedding=1.552")
    return Speedup(parse_selector(sel.strip()), parse_factor(value.strip(), f"--speedup {text!r}"),
                   source="command line")


def _entry_from_mapping(d: Any, where: str, default_source: str) -> Speedup:
    if not isinstance(d, dict):
        raise UserError(f"{where}: expected a table/object with select and speedup")
    unknown = set(d) - _ENTRY_KEYS
    if unknown:
        raise UserError(f"{where}: unknown key(s) {sorted(unknown)} (allowed: {sorted(_ENTRY_KEYS)})")
    short = [k for k in _SHORTHAND if k in d]
    if "select" in d and short:
        raise UserError(f"{where}: give either select or {'/'.join(_SHORTHAND)} keys, not both")
    if "select" in d:
        if not isinstance(d["select"], str):
            raise UserError(f"{where}: select must be a string like \"category:embedding\"")
        text = d["select"]
    elif short:
        for k in short:
            if not isinstance(d[k], str) or not d[k]:
                raise UserError(f"{where}: {k} must be a non-empty string")
        text = " & ".join(f"{k}:{d[k]}" for k in short)
    else:
        raise UserError(f"{where}: no selector (give select = \"KIND:PATTERN\")")
    try:
        sel = parse_selector(text)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
    if "speedup" not in d:
        raise UserError(f"{where}: missing speedup value")
    return Speedup(sel, parse_factor(d["speedup"], where), _parse_bool(d.get("verified"), where),
                   str(d.get("source") or default_source), str(d.get("note", "")))


@dataclass
class SpeedupFile:
    entries: list[Speedup]
    warnings: list[str] = field(default_factory=list)
    kind: str = "speedups"  # speedups | verify
    results: list[dict] = field(default_factory=list)  # verify results as read (for distributions)


def _is_verify_result(d: Any) -> bool:
    return isinstance(d, dict) and "problem" in d and "verdict" in d


def _candidate(r: dict) -> str:
    c = r.get("candidate")
    return Path(str(c)).name if c else ""


def _best_passes(results: list[dict], path: str) -> tuple[dict[str, tuple[float, str]], list[str], list[str]]:
    """Per problem (in first-seen order): the fastest passing result, and the problems with no usable pass.

    Returns ({problem: (speedup, candidate)}, problems without a pass, warnings).
    """
    best: dict[str, tuple[float, str]] = {}
    npass: dict[str, int] = {}
    order: list[str] = []
    skipped: dict[str, list[str]] = {}
    warnings: list[str] = []
    for i, r in enumerate(results, 1):
        if not _is_verify_result(r):
            raise UserError(f"{path}: result {i} is not a headroom verify result (needs problem and verdict)")
        name = str(r["problem"])
        if name not in order:
            order.append(name)
        verdict = str(r["verdict"])
        label = name + (f" ({_candidate(r)})" if _candidate(r) else "")
        if verdict != "pass":
            skipped.setdefault(verdict, []).append(label)
            continue
        try:
            f = parse_factor(r.get("speedup"), f"{path}: {label}")
        except UserError as e:
            warnings.append(f"{e}; skipped")
            continue
        npass[name] = npass.get(name, 0) + 1
        if name not in best or f > best[name][0]:
            best[name] = (f, _candidate(r))
    for verdict, names in sorted(skipped.items()):
        warnings.append(f"{path}: skipped {len(names)} result(s) with verdict {verdict!r} "
                        f"(only verdict 'pass' is used): {', '.join(names)}")
    for name, k in npass.items():
        if k > 1:
            f, cand = best[name]
            warnings.append(f"{path}: {name} has {k} passing candidates; using the fastest"
                            f"{' (' + cand + ')' if cand else ''} at {f:g}x")
    ordered = {n: best[n] for n in order if n in best}
    return ordered, [n for n in order if n not in best], warnings


def _from_verify(results: list[dict], path: str) -> SpeedupFile:
    best, _, warnings = _best_passes(results, path)
    src = f"{path}: headroom verify"
    entries = [Speedup(parse_selector(f"problem:{name}"), f, True, src, note=cand)
               for name, (f, cand) in best.items()]
    return SpeedupFile(entries, warnings, "verify", list(results))


def _load_toml(path: Path, text: str) -> SpeedupFile:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: invalid TOML ({e})") from None
    rows = doc.get("speedup")
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{path}: expected [[speedup]] tables (see docs/projection.md)")
    default_source = str(doc.get("source", path))
    return SpeedupFile([_entry_from_mapping(r, f"{path}: [[speedup]] #{i}", default_source)
                        for i, r in enumerate(rows, 1)])


def _load_json(path: Path, text: str) -> SpeedupFile:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise UserError(f"{path}: invalid JSON ({e})") from None
    if isinstance(doc, dict) and isinstance(doc.get("results"), list) and (
            doc.get("tool") == "headroom verify" or all(_is_verify_result(r) for r in doc["results"])):
        return _from_verify(doc["results"], str(path))
    if _is_verify_result(doc):
        return _from_verify([doc], str(path))
    if isinstance(doc, list) and doc and all(_is_verify_result(r) for r in doc):
        return _from_verify(doc, str(path))
    rows = doc.get("speedups") if isinstance(doc, dict) else doc
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{path}: expected {{\"speedups\": [...]}}, a list of entries, or headroom verify output")
    default_source = str(doc.get("source", path)) if isinstance(doc, dict) else str(path)
    return SpeedupFile([_entry_from_mapping(r, f"{path}: entry {i}", default_source)
                        for i, r in enumerate(rows, 1)])


def _load_csv(path: Path, text: str) -> SpeedupFile:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    if not reader.fieldnames or "speedup" not in reader.fieldnames or not (
            "select" in reader.fieldnames or any(k in reader.fieldnames for k in _SHORTHAND)):
        raise UserError(f"{path}: CSV needs a header with 'select' and 'speedup' columns")
    entries = []
    for i, row in enumerate(reader, 2):
        if None in row:
            raise UserError(f"{path}: line {i}: more fields than the header (quote selectors that hold commas)")
        row = {k: v for k, v in row.items() if v not in (None, "")}
        entries.append(_entry_from_mapping(row, f"{path}: line {i}", str(path)))
    if not entries:
        raise UserError(f"{path}: no speedup rows")
    return SpeedupFile(entries)


def load_speedup_file(path: str | Path) -> SpeedupFile:
    """Read a .toml, .json or .csv speedup file, or headroom verify JSON (single result or suite)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a speedup file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read ({e})") from None
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return _load_toml(path, text)
    if suffix == ".json":
        return _load_json(path, text)
    if suffix == ".csv":
        return _load_csv(path, text)
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")) and not stripped.startswith("[["):
        return _load_json(path, text)
    if "[[speedup]]" in text:
        return _load_toml(path, text)
    raise UserError(f"{path}: unknown speedup file type (use .toml, .json or .csv)")


# --- speedup distributions (a whole benchmark's results) -----------------------------------


@dataclass(frozen=True)
class Distribution:
    """Per-problem outcomes of a benchmark: the speedup of each passing problem, None for failures."""

    speedups: tuple[float | None, ...]
    names: tuple[str, ...] = ()
    source: str = ""

    @property
    def n(self) -> int:
        return len(self.speedups)

    @property
    def wins(self) -> list[float]:
        return [s for s in self.speedups if s is not None and s > 1.0]

    @property
    def win_rate(self) -> float:
        return len(self.wins) / self.n if self.n else 0.0

    @property
    def median_win(self) -> float:
        w = self.wins
        return float(np.median(w)) if w else 1.0

    def effective(self) -> np.ndarray:
        """What a user would deploy per problem: the new kernel if it wins, else PyTorch's (1.0)."""
        return np.array([max(s, 1.0) if s is not None else 1.0 for s in self.speedups], dtype=float)


def load_distribution(path: str | Path) -> Distribution:
    """A distribution from verify output (failures count as no win), or any speedup file / plain number list."""
    path = Path(path)
    if path.suffix.lower() in (".txt", "") and path.exists():
        vals = [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        return Distribution(tuple(parse_factor(v, f"{path}: line {i}") for i, v in enumerate(vals, 1)),
                            source=str(path))
    if path.suffix.lower() == ".json" and path.exists():
        try:
            doc = json.loads(path.read_text())
        except ValueError as e:
            raise UserError(f"{path}: invalid JSON ({e})") from None
        if isinstance(doc, list) and doc and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in doc):
            return Distribution(tuple(parse_factor(v, f"{path}: item {i}") for i, v in enumerate(doc, 1)),
                                source=str(path))
    sf = load_speedup_file(path)
    if sf.kind == "verify":
        # One value per problem: its fastest passing candidate, None if none passed.
        best, failed, _ = _best_passes(sf.results, str(path))
        names = list(best) + failed
        return Distribution(tuple([best[n][0] for n in best] + [None] * len(failed)), tuple(names), str(path))
    return Distribution(tuple(e.speedup for e in sf.entries), tuple(str(e.selector) for e in sf.entries), str(path))


# --- matching entries against events ---------------------------------------------------------


def event_phase(*labels: str) -> str:
    """forward | backward | optimizer for an event launched under these ops / ranges."""
    if any(_OPTIMIZER_RX.search(x) for x in labels if x):
        return "optimizer"
    if any(_BACKWARD_RX.search(x) for x in labels if x):
        return "backward"
    return "forward"


class _Matcher:
    """Evaluates atoms over an events DataFrame, once per distinct column value."""

    def __init__(self, events: pd.DataFrame, problems: ProblemMap) -> None:
        self.events = events
        self.problems = problems
        self._codes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.n = len(events)

    def _col(self, col: str) -> tuple[np.ndarray, np.ndarray]:
        if col not in self._codes:
            if col in self.events.columns:
                s = self.events[col].astype(object).where(self.events[col].notna(), "").astype(str)
            else:
                s = pd.Series([""] * self.n, dtype=object)
            codes, uniques = pd.factorize(s, sort=False)
            self._codes[col] = (codes, np.asarray(uniques, dtype=object))
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
        exact = (lambda v: fnmatch.fnmatchcase(v, p)) if _GLOB_CHARS & set(p) else (lambda v: v == p)
        if a.kind == "category":
            if p == "addressable":
                if "addressable" not in self.events.columns:
                    return np.zeros(self.n, dtype=bool)
                return self.events["addressable"].fillna(False).to_numpy(dtype=bool)
            if p in ("all", "*"):
                return np.ones(self.n, dtype=bool)
            return self._by_value("category", exact)
        if a.kind == "op":
            return self._by_value("op", exact) | self._by_value("top_op", exact)
        if a.kind == "kind":
            return self._by_value("kind", lambda v: v == p)
        if a.kind == "phase":
            return self.phases() == p
        if a.kind in ("kernel", "module", "annotation"):
            rx = re.compile(p, re.IGNORECASE)
            col = "name" if a.kind == "kernel" else a.kind
            return self._by_value(col, lambda v: v != "" and rx.search(v) is not None)
        if a.kind == "problem":
            prob = self.problems.get(p)
            out = np.zeros(self.n, dtype=bool)
            for sel in prob.selectors:
                out |= self.selector(sel)
            return out
        raise AssertionError(a.kind)

    def phases(self) -> np.ndarray:
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
    mask: np.ndarray        # every event the selector picks
    applied: np.ndarray     # the events that take this entry's factor (after overlaps)
    kernels: int
    us: float               # sum of durations of the picked events
    wall_us: float          # their share of busy time
    addressable_us: float
    applied_kernels: int
    applied_us: float
    applied_wall_us: float
    top: list[tuple[str, float]]  # the picked kernels with the most time

    def to_dict(self) -> dict[str, Any]:
        d = self.entry.to_dict()
        d.update({"kernels": self.kernels, "us": self.us, "wall_us": self.wall_us,
                  "addressable_us": self.addressable_us, "applied_kernels": self.applied_kernels,
                  "applied_us": self.applied_us, "applied_wall_us": self.applied_wall_us,
                  "top_kernels": [{"name": n, "us": u} for n, u in self.top]})
        return d


@dataclass
class Resolution:
    """Per-event speedup factors (1.0 where nothing applies) and what each entry matched."""

    factors: np.ndarray
    matches: list[EntryMatch]
    warnings: list[str]

    @property
    def selected(self) -> np.ndarray:
        return self.factors != 1.0

    def to_dict(self) -> list[dict[str, Any]]:
        return [m.to_dict() for m in self.matches]


def _durations(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    dur = events["dur"].to_numpy(dtype=float) if "dur" in events.columns else np.zeros(len(events))
    wall = events["wall_us"].to_numpy(dtype=float) if "wall_us" in events.columns else dur
    return dur, wall


def resolve(entries: list[Speedup], events: pd.DataFrame, problems: ProblemMap | None = None,
            strict: bool = False) -> Resolution:
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
    addr = events["addressable"].fillna(False).to_numpy(dtype=bool) if "addressable" in events.columns \
        else np.zeros(n, dtype=bool)
    names = events["name"].to_numpy(dtype=object) if "name" in events.columns else np.full(n, "", dtype=object)
    warnings: list[str] = []
    matches: list[EntryMatch] = []
    seen: dict[str, int] = {}
    for i, e in enumerate(entries):
        key = str(e.selector)
        if key in seen:
            prev = entries[seen[key]]
            msg = (f"{e.label} ({e.source}) repeats the selector of {prev.label} ({prev.source})"
                   + ("" if prev.speedup == e.speedup else f"; using the first, {prev.speedup:g}"))
            warnings.append(msg)
        else:
            seen[key] = i
        try:
            mask = m.selector(e.selector)
        except UserError as err:
            if not e.source.endswith("headroom verify"):
                raise
            # A verified result for a problem the mapping does not know: say so, use nothing.
            warnings.append(f"{e.label} ({e.source}): {err}; skipped")
            mask = np.zeros(n, dtype=bool)
        free = mask & (owner < 0)
        taken = mask & (owner >= 0)
        if not mask.any() and not (warnings and warnings[-1].endswith("; skipped") and e.label in warnings[-1]):
            warnings.append(f"{e.label} ({e.source}) matches no kernel in this trace")
        elif taken.any():
            for j in np.unique(owner[taken]):
                both = taken & (owner == j)
                first = entries[j]
                warnings.append(
                    f"{e.label} overlaps {first.label} on {int(both.sum())} kernel(s) "
                    f"({dur[both].sum():.1f} us); they keep the first entry's factor {first.speedup:g}")
        if e.speedup < 1.0 and mask.any():
            warnings.append(f"{e.label} ({e.source}) is a slowdown (factor < 1): its kernels get slower")
        factors[free] = e.speedup
        owner[free] = i
        top: list[tuple[str, float]] = []
        if mask.any():
            s = pd.Series(dur[mask]).groupby(names[mask]).sum().sort_values(ascending=False).head(3)
            top = [(str(k), float(v)) for k, v in s.items()]
        matches.append(EntryMatch(
            entry=e, mask=mask, applied=free, kernels=int(mask.sum()), us=float(dur[mask].sum()),
            wall_us=float(wall[mask].sum()), addressable_us=float(dur[mask & addr].sum()),
            applied_kernels=int(free.sum()), applied_us=float(dur[free].sum()),
            applied_wall_us=float(wall[free].sum()), top=top))
    if strict and warnings:
        raise UserError(f"{warnings[0]} (strict mode{'; ' + str(len(warnings) - 1) + ' more' if len(warnings) > 1 else ''})")
    return Resolution(factors, matches, warnings)


def collect_entries(cli: Iterable[str] = (), files: Iterable[str | Path] = ()) -> tuple[list[Speedup], list[str]]:
    """Entries from ``--speedup`` options first (they win overlaps), then from files in order; plus the files' warnings."""
    entries: list[Speedup] = [parse_cli_speedup(t) for t in cli]
    warnings: list[str] = []
    for f in files:
        sf = load_speedup_file(f)
        entries.extend(sf.entries)
        warnings.extend(sf.warnings)
    return entries, warnings
