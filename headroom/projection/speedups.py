"""Speedup input: which kernel time gets faster, and by how much.

A *speedup entry* pairs a selector (:mod:`headroom.projection.selectors`) with a
factor (> 0; 2.0 means the selected kernels take half the time). Entries come
from the command line (``--speedup SELECTOR=FACTOR``), from a TOML/JSON/CSV
file, or from the JSON that ``headroom verify`` writes.

Nothing here guesses: an entry that selects nothing, two entries that select
the same kernels, and an invalid factor are reported (warnings, or errors with
``strict=True``; invalid factors are always errors).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from headroom import datafiles
from headroom.errors import UserError
from headroom.files import read_text
from headroom.jsonio import OMIT_NONE, encoded
from headroom.projection.selectors import Selector, parse_selector

# A factor below this is a slowdown of more than a billion times: no measurement says that, and
# far below it (1e-308) the projected durations overflow to infinity.
MIN_FACTOR = 1e-9

_SHORTHAND = ("category", "op", "kernel", "module", "annotation", "kind", "problem")
_ENTRY_KEYS = {"select", "speedup", "launches", "call_us", "syncs", "verified", "source", "note", *_SHORTHAND}


@dataclass(frozen=True)
class Speedup:
    selector: Selector = field(metadata=encoded(str))
    speedup: float
    verified: bool | None = None
    source: str = ""
    note: str = ""
    # Kernels each call of the selected region launches after the change (None: unchanged).
    # A call is one instance of the region on the CPU timeline (docs/projection.md, "Calls").
    launches: int | None = None
    # A `headroom verify` result (its problem's fastest pass), as opposed to an entry a person wrote.
    verify_result: bool = False
    # The CPU time of one call after the change, in us on the unprofiled clock (None: `launches` times
    # what the trace's single-launch ops cost). Needs `launches` (docs/projection.md, "The cost of a call").
    call_us: float | None = field(default=None, metadata=OMIT_NONE)
    # Host synchronisations each call makes after the change (None: as before; docs/projection.md,
    # "Host synchronisations"): at each, the CPU waits until the GPU has run everything queued.
    syncs: float | None = field(default=None, metadata=OMIT_NONE)
    # The CPU time of one call *before* the change, measured the same way as `call_us` (verify: the
    # reference's call, unprofiled). With the trace's footprint of the same calls it says how much slower
    # the profiled CPU ran, where the step time cannot (a GPU-bound step): docs/projection.md.
    reference_call_us: float | None = None
    # A verify result's `capture` ("ok", "breaks capture: ...", "not checked"; None: not a verify result or
    # one from before the field): whether the candidate was checked and timed as a CUDA graph replay runs it.
    capture: str | None = None

    # An entry as JSON: what it selects and claims (`call_us` and `syncs` only when given).
    JSON_KEYS: ClassVar[tuple[str, ...]] = ("selector", "speedup", "launches", "verified", "source", "call_us", "syncs")

    @property
    def label(self) -> str:
        return (
            f"{self.selector}={self.speedup:g}"
            + ("" if self.launches is None else f",launches={self.launches}")
            + ("" if self.call_us is None else f",call_us={self.call_us:g}")
        )


def _number(value: Any, where: str, wrong: str) -> float:
    """`value` as a float (JSON/TOML numbers or text, never a bool); `wrong` completes the error."""
    if isinstance(value, bool):
        raise UserError(f"{where}: {wrong}, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UserError(f"{where}: {wrong}, got {value!r}") from None


def parse_factor(value: Any, where: str) -> float:
    """A speedup factor: a finite number > 0. Anything else is a UserError naming `where`."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise UserError(f"{where}: missing speedup value")
    f = _number(value, where, "speedup must be a number")
    if math.isnan(f):
        raise UserError(f"{where}: speedup is NaN")
    if math.isinf(f):
        raise UserError(f"{where}: speedup must be finite (the zero-time bound is always reported)")
    if f <= 0:
        raise UserError(f"{where}: speedup must be > 0, got {f:g}")
    if f < MIN_FACTOR:
        raise UserError(
            f"{where}: speedup {f:g} makes the selected kernels {1 / f:.3g}x slower; "
            f"the projection would overflow (factors below {MIN_FACTOR:g} are refused)"
        )
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


# The most kernels one call may launch after the change: the replay lays every one out, and no rewrite of
# one call launches more (a whole model's forward launches a few thousand).
MAX_LAUNCHES = 10_000


def parse_launches(value: Any, where: str) -> int | None:
    """Kernels per call after the change: a whole number in [0, MAX_LAUNCHES] (None: unchanged)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    wrong = f"launches must be a whole number from 0 to {MAX_LAUNCHES:,}"
    f = _number(value, where, wrong)
    if not math.isfinite(f) or f < 0 or f > MAX_LAUNCHES or f != int(f):
        raise UserError(f"{where}: {wrong}, got {value!r}")
    return int(f)


def parse_call_us(value: Any, where: str, launches: int | None) -> float | None:
    """The CPU time of one call after the change (us, unprofiled): a finite number >= 0, with `launches`."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    wrong = "call_us must be a number of microseconds >= 0"
    f = _number(value, where, wrong)
    if not math.isfinite(f) or f < 0:
        raise UserError(f"{where}: {wrong}, got {value!r}")
    if launches is None:
        raise UserError(f"{where}: call_us needs launches (the kernels each call launches after the change)")
    return f


_CLI_LAUNCHES = re.compile(r"^(?P<rest>.*),\s*launches\s*=\s*(?P<n>[^=,]*)$")
# An option after the factor (`,NAME=VALUE`) that is not launches: never part of a selector.
_CLI_OPTION = re.compile(r"=[^=,]*,\s*(?P<key>[A-Za-z_][\w-]*)\s*=")


def parse_cli_speedup(text: str) -> Speedup:
    """``SELECTOR=FACTOR[,launches=N]`` as given to ``--speedup`` (the factor follows the last '=' before it)."""
    rest, launches = text, None
    other = _CLI_OPTION.search(text)
    if other and other.group("key").lower() != "launches":
        raise UserError(
            f"--speedup {text!r}: unknown option {other.group('key')!r} after the factor (SELECTOR=FACTOR[,launches=N])"
        )
    m = _CLI_LAUNCHES.match(text)
    if m:
        rest, launches = m.group("rest"), parse_launches(m.group("n").strip() or "?", f"--speedup {text!r}")
    sel, sep, value = rest.rpartition("=")
    if not sep or not sel.strip():
        raise UserError(f"--speedup {text!r}: expected SELECTOR=FACTOR[,launches=N], e.g. category:embedding=1.552")
    return Speedup(
        parse_selector(sel.strip()),
        parse_factor(value.strip(), f"--speedup {text!r}"),
        source="command line",
        launches=launches,
    )


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
            raise UserError(f'{where}: select must be a string like "category:embedding"')
        text = d["select"]
    elif short:
        for k in short:
            if not isinstance(d[k], str) or not d[k]:
                raise UserError(f"{where}: {k} must be a non-empty string")
        text = " & ".join(f"{k}:{d[k]}" for k in short)
    else:
        raise UserError(f'{where}: no selector (give select = "KIND:PATTERN")')
    try:
        sel = parse_selector(text)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
    if "speedup" not in d:
        raise UserError(f"{where}: missing speedup value")
    launches = parse_launches(d.get("launches"), where)
    return Speedup(
        sel,
        parse_factor(d["speedup"], where),
        _parse_bool(d.get("verified"), where),
        str(d.get("source") or default_source),
        str(d.get("note", "")),
        launches,
        call_us=parse_call_us(d.get("call_us"), where, launches),
        syncs=parse_syncs(d.get("syncs"), where, launches),
    )


def parse_syncs(value: Any, where: str, launches: int | None) -> float | None:
    """Host synchronisations per call after the change: a finite number >= 0, with `launches`."""
    if value is None:
        return None
    v = _number(value, where, "syncs must be a number of host synchronisations per call >= 0")
    if not math.isfinite(v) or v < 0:
        raise UserError(f"{where}: syncs must be a number of host synchronisations per call >= 0, got {value!r}")
    if launches is None:
        raise UserError(f"{where}: syncs needs launches (the kernels each call launches after the change)")
    return v


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


def _verified_launches(r: dict) -> int | None:
    """Kernels the candidate launches per call, from verify's ``launches_per_call`` (None when not measured)."""
    lpc = r.get("launches_per_call")
    n = lpc.get("candidate") if isinstance(lpc, dict) else None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        return None
    return n


def _verified_call(r: dict) -> tuple[float | None, float | None, float | None]:
    """The candidate's CPU time per call (us, unprofiled), its host synchronisations per call and the
    reference's CPU time per call, from verify's ``per_call`` (None where it was not measured)."""
    pc = r.get("per_call")
    cand = pc.get("candidate") if isinstance(pc, dict) else None
    ref = pc.get("reference") if isinstance(pc, dict) else None
    if not isinstance(cand, dict):
        return None, None, None

    def num(v: Any) -> float | None:
        return (
            float(v)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
            else None
        )

    return num(cand.get("call_us")), num(cand.get("syncs")), num(ref.get("call_us")) if isinstance(ref, dict) else None


def _gpu_factor(r: dict) -> float | None:
    """The GPU-time speedup of a candidate verify had to time serialised (``timing.candidate_clock``
    "plain": its forward waits on the GPU, a host synchronisation): the ratio of the kernel times
    profiled in each child (``per_call.*.kernel_us``). Its serialised speedup mixes in the CPU time a
    synchronised call spends, which the projection models itself (``call_us``, ``syncs``); applied to
    the kernels as well it would be counted twice. None where verify timed it on the GPU's clock."""
    t, pc = r.get("timing"), r.get("per_call")
    if (
        not isinstance(t, dict)
        or t.get("candidate_clock") != "plain"
        or t.get("clock") != "gated"
        or not isinstance(pc, dict)
    ):
        return None
    ref, cand = pc.get("reference"), pc.get("candidate")
    k = [x.get("kernel_us") if isinstance(x, dict) else None for x in (ref, cand)]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in k):
        return None
    return float(k[0]) / float(k[1])  # type: ignore[arg-type]  # both checked numbers above


@dataclass(frozen=True)
class Pass:
    """A problem's fastest passing verify result."""

    speedup: float
    candidate: str
    launches: int | None  # kernels per call the candidate launched (None: not measured)


@dataclass
class BestPasses:
    """What a verify results file says per problem (in first-seen order)."""

    best: dict[str, Pass]  # the fastest passing result of each problem that has one
    failed: list[str]  # the problems with no usable pass
    warnings: list[str]


def best_passes(results: list[dict], path: str) -> BestPasses:
    """Per problem (in first-seen order): the fastest passing result, and the problems with no usable pass."""
    best: dict[str, Pass] = {}
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
        if name not in best or f > best[name].speedup:
            best[name] = Pass(f, _candidate(r), _verified_launches(r))
    for verdict, names in sorted(skipped.items()):
        warnings.append(
            f"{path}: skipped {len(names)} result(s) with verdict {verdict!r} "
            f"(only verdict 'pass' is used): {', '.join(names)}"
        )
    for name, k in npass.items():
        if k > 1:
            f, cand = best[name].speedup, best[name].candidate
            warnings.append(
                f"{path}: {name} has {k} passing candidates; using the fastest"
                f"{' (' + cand + ')' if cand else ''} at {f:g}x"
            )
    ordered = {n: best[n] for n in order if n in best}
    return BestPasses(ordered, [n for n in order if n not in best], warnings)


def _from_verify(results: list[dict], path: str) -> SpeedupFile:
    passes = best_passes(results, path)
    best, warnings = passes.best, passes.warnings
    src = f"{path}: headroom verify"
    calls: dict[str, tuple[float | None, float | None, float | None]] = {}
    gpu: dict[str, float] = {}
    capture: dict[str, str] = {}
    for r in results:  # the chosen (fastest passing) result of each problem
        name = str(r.get("problem"))
        if (
            name in best
            and r.get("verdict") == "pass"
            and _candidate(r) == best[name].candidate
            and r.get("speedup") == best[name].speedup
        ):
            calls[name] = _verified_call(r)
            if isinstance(r.get("capture"), str):
                capture[name] = r["capture"]
            g = _gpu_factor(r)
            if g is not None and calls[name][1]:
                gpu[name] = g
                warnings.append(
                    f"{path}: {name}: timed serialised (it synchronises with the host); its kernels "
                    f"take the profiled kernel-time ratio {g:.4g}x, its {calls[name][1]:g} "
                    f"synchronisation(s) and CPU time per call are modelled on the CPU side"
                )
    entries = []
    for name, p in best.items():
        f, cand, n = p.speedup, p.candidate, p.launches
        call_us, syncs, ref_us = calls.get(name, (None, None, None))
        f = gpu.get(name, f)
        entries.append(
            Speedup(
                parse_selector(f"problem:{name}"),
                f,
                True,
                src,
                note=cand,
                verify_result=True,
                launches=n,
                call_us=call_us if n is not None else None,
                syncs=syncs if n is not None else None,
                reference_call_us=ref_us if n is not None else None,
                capture=capture.get(name),
            )
        )
    return SpeedupFile(entries, warnings, "verify", list(results))


def _load_toml(path: Path, text: str) -> SpeedupFile:
    try:
        doc = datafiles.loads(text)
    except datafiles.TOMLDecodeError as e:
        raise UserError(f"{path}: invalid TOML ({e})") from None
    rows = doc.get("speedup")
    if not isinstance(rows, list) or not rows:
        raise UserError(f"{path}: expected [[speedup]] tables (see docs/projection.md)")
    default_source = str(doc.get("source", path))
    return SpeedupFile(
        [_entry_from_mapping(r, f"{path}: [[speedup]] #{i}", default_source) for i, r in enumerate(rows, 1)]
    )


def _load_json(path: Path, text: str) -> SpeedupFile:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise UserError(f"{path}: invalid JSON ({e})") from None
    if (
        isinstance(doc, dict)
        and isinstance(doc.get("results"), list)
        and (doc.get("tool") == "headroom verify" or all(_is_verify_result(r) for r in doc["results"]))
    ):
        return _from_verify(doc["results"], str(path))
    if _is_verify_result(doc):
        return _from_verify([doc], str(path))
    if isinstance(doc, list) and doc and all(_is_verify_result(r) for r in doc):
        return _from_verify(doc, str(path))
    rows = doc.get("speedups") if isinstance(doc, dict) else doc
    if not isinstance(rows, list) or not rows:
        raise UserError(f'{path}: expected {{"speedups": [...]}}, a list of entries, or headroom verify output')
    default_source = str(doc.get("source", path)) if isinstance(doc, dict) else str(path)
    return SpeedupFile([_entry_from_mapping(r, f"{path}: entry {i}", default_source) for i, r in enumerate(rows, 1)])


def _load_csv(path: Path, text: str) -> SpeedupFile:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    if (
        not reader.fieldnames
        or "speedup" not in reader.fieldnames
        or not ("select" in reader.fieldnames or any(k in reader.fieldnames for k in _SHORTHAND))
    ):
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


def load_speedup_file(path: str | os.PathLike[str]) -> SpeedupFile:
    """Read a .toml, .json or .csv speedup file, or headroom verify JSON (single result or suite)."""
    path = Path(path)
    text = read_text(path, "a speedup file")
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


def collect_entries(
    cli: Iterable[str] = (), files: Iterable[str | os.PathLike[str]] = ()
) -> tuple[list[Speedup], list[str]]:
    """Entries from ``--speedup`` options first (they win overlaps), then from files in order; plus the files' warnings."""
    entries: list[Speedup] = [parse_cli_speedup(t) for t in cli]
    warnings: list[str] = []
    for f in files:
        sf = load_speedup_file(f)
        entries.extend(sf.entries)
        warnings.extend(sf.warnings)
    return entries, warnings
