"""Which op (or module) to make faster: ranked by the end-to-end gain it would give."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.jsonio import OMIT_NONE
from headroom.projection.baseline import Baseline, as_baseline
from headroom.projection.replay import replay_gain
from headroom.trace.analysis import Analysis
from headroom.trace.codes import factorized
from headroom.trace.modules import STACK_SEP

if TYPE_CHECKING:
    from headroom.projection.costs import Device

DEFAULT_SPEEDUP = 1.5
NO_OP = "(no op)"
_TARGET_COLUMNS = [
    "kind",
    "name",
    "category",
    "addressable",
    "addressable_fraction",
    "kernels",
    "us",
    "share",
    "wall_us",
    "gain",
    "gain_inf",
    "projected_us",
    "projected_inf_us",
]
# Only module rows (kind module | module_path) have these.
MODULE_COLUMNS = ["scope", "calls", "kernels_per_call", "cpu_us_per_call", "inputs", "categories", "phases"]
MODULE_KINDS = ("module", "module_path")
SCOPES = ("self", "total")
GROUPINGS = ("op", "top_op", "module", "module_path", "kernel")
# The event columns module_targets reads.
_MODULE_READS = ("dur", "addressable", "category", "phase", "wall_us", "device")


def _amdahl_groups(b: Baseline, keys: np.ndarray, s: float) -> pd.DataFrame:
    """Amdahl per group at speedup s and at infinity (vectorised; per device, slowest device wins)."""
    ev = b.events
    wall = ev["wall_us"].to_numpy(dtype=float)
    dev = ev["device"].to_numpy() if "device" in ev.columns else np.zeros(len(ev))
    g = pd.DataFrame({"key": keys, "dev": dev, "wall": wall}).groupby(["key", "dev"], sort=False)["wall"].sum()
    g = g.unstack("dev", fill_value=0.0)
    # One device: T - t(1 - 1/s). Several: the window shrinks by the smallest per-device saving.
    if g.shape[1] == 1:
        t = g.iloc[:, 0]
    else:
        t = g.min(axis=1)
    out = pd.DataFrame({"wall_us": g.sum(axis=1)})
    out["projected_us"] = b.wall_us - t * (1.0 - 1.0 / s)
    out["projected_inf_us"] = b.wall_us - t
    return out


def _with_gains(t: pd.DataFrame, b: Baseline, total: float) -> pd.DataFrame:
    """share, addressable_fraction, addressable, gain and gain_inf of grouped rows (us, addressable_us,
    projected_us, projected_inf_us)."""
    t["share"] = t["us"] / total if total > 0 else 0.0
    frac = np.where(t["us"] > 0, t["addressable_us"] / t["us"].where(t["us"] > 0, 1.0), 0.0)
    t["addressable_fraction"] = frac
    t["addressable"] = np.where(frac >= 0.999, "yes", np.where(frac <= 0.001, "no", "partly"))
    t["gain"] = 1.0 - t["projected_us"] / b.wall_us if b.wall_us > 0 else 0.0
    t["gain_inf"] = 1.0 - t["projected_inf_us"] / b.wall_us if b.wall_us > 0 else 0.0
    return t


def _ranked(t: pd.DataFrame, columns: list[str], top: int | None) -> pd.DataFrame:
    t = t.sort_values(["gain", "us"], ascending=False, kind="stable").reset_index(drop=True)
    return (t.head(top) if top else t)[columns].copy()


def _with_replay(
    t: pd.DataFrame, b: Baseline, speedup: float, replay_top: int, members: Callable[[str], np.ndarray]
) -> pd.DataFrame:
    """replay_gain / replay_gain_inf for the first `replay_top` rows (`members(name)`: that row's events)."""
    if replay_top <= 0 or b.mode != "gpu":
        return t
    rg = np.full(len(t), np.nan)
    rgi = np.full(len(t), np.nan)
    for row in range(min(replay_top, len(t))):
        mask = members(t["name"].iat[row])
        rg[row] = replay_gain(b, speedup, mask)
        rgi[row] = replay_gain(b, math.inf, mask)
    t["replay_gain"] = rg
    t["replay_gain_inf"] = rgi
    return t


def targets(
    analysis: Analysis | Baseline,
    speedup: float = DEFAULT_SPEEDUP,
    by: Sequence[str] = ("op", "module"),
    top: int | None = 20,
    replay_top: int = 0,
    scope: str = "self",
) -> pd.DataFrame:
    """Ops, kernels and nn.Modules ranked by end-to-end gain.

    Columns: kind (op|top_op|kernel|module|module_path), name, category (the one with
    most of its time), addressable (yes|no|partly), addressable_fraction, kernels, us
    (kernel time over the profiled steps), share (of all kernel time), wall_us (busy-time
    share), gain and gain_inf (fraction of the measured window saved at `speedup` and at
    infinite speedup, Amdahl), projected_us, projected_inf_us; with ``replay_top=N`` also
    replay_gain and replay_gain_inf for the first N rows of each kind. Module rows
    (``module``: by class, ``module_path``: by instance) add MODULE_COLUMNS
    (`module_targets`). A trace without module ranges gives no module rows:
    `module_ranges_missing` says so.
    """
    if not (isinstance(speedup, (int, float)) and math.isfinite(speedup) and speedup > 0):
        raise UserError(f"--speedup must be a finite number > 0, got {speedup!r}")
    if scope not in SCOPES:
        raise UserError(f"unknown module scope {scope!r}; use self or total")
    for grouping in by:
        if grouping not in GROUPINGS:
            raise UserError(f"unknown grouping {grouping!r} ({', '.join(GROUPINGS)})")
    b = as_baseline(analysis)
    ev = b.events
    total = float(ev["dur"].sum())
    frames = []
    for grouping in by:
        if grouping in MODULE_KINDS:
            t = module_targets(b, speedup, grouping, scope, top=top, replay_top=replay_top)
            if len(t):
                frames.append(t)
            continue
        if grouping == "op":
            keys = ev["op"].astype(str).where(ev["op"].astype(str) != "", NO_OP).to_numpy(dtype=object)
        elif grouping == "top_op":
            keys = ev["top_op"].astype(str).where(ev["top_op"].astype(str) != "", NO_OP).to_numpy(dtype=object)
        else:
            keys = ev["name"].astype(str).to_numpy(dtype=object)
        # Grouped by integer codes: each groupby below would hash every row's text anew. A missing key or
        # category (code -1) joins no group, as pandas' groupby drops a missing key.
        codes, names = factorized(keys)
        valid = (keys != "") & (codes >= 0)
        sub = ev.loc[valid]
        if len(sub) == 0:
            continue
        k = codes[valid]
        categories, category_names = factorized(sub["category"].astype(str).to_numpy(dtype=object))
        dur = sub["dur"].to_numpy(dtype=float)
        addr = sub["addressable"].fillna(False).to_numpy(dtype=bool)
        agg = (
            pd.DataFrame({"key": k, "dur": dur, "addr": np.where(addr, dur, 0.0)})
            .groupby("key", sort=False)
            .agg(us=("dur", "sum"), kernels=("dur", "size"), addressable_us=("addr", "sum"))
        )
        named = categories >= 0
        cat = (
            pd.DataFrame({"key": k[named], "category": categories[named], "dur": dur[named]})
            .groupby(["key", "category"], sort=False)["dur"]
            .sum()
            .reset_index()
            .sort_values("dur", ascending=False, kind="stable")
            .drop_duplicates("key")
            .set_index("key")["category"]
        )
        am = _amdahl_groups(
            Baseline(sub.reset_index(drop=True), b.wall_us, b.window, b.num_steps, b.n_devices), k, speedup
        )
        t = agg.join(am).join(cat.rename("category"))
        t["category"] = [category_names[int(c)] if c == c else np.nan for c in t["category"].to_numpy(dtype=float)]
        t["kind"] = grouping
        t["name"] = names[t.index.to_numpy()].astype(str)
        t = _ranked(_with_gains(t, b, total), _TARGET_COLUMNS, top)
        code_of = {name: code for code, name in enumerate(names.tolist())}

        def members(name: str, valid=valid, k=k, code_of=code_of) -> np.ndarray:
            mask = valid.copy()
            mask[valid] = k == code_of.get(name, -1)
            return mask

        frames.append(_with_replay(t, b, speedup, replay_top, members))
    if not frames:
        return pd.DataFrame(columns=_TARGET_COLUMNS)
    return pd.concat(frames, ignore_index=True)


# --- modules --------------------------------------------------------------------


def has_module_ranges(analysis: Analysis | Baseline) -> bool:
    """Whether any event of the trace ran inside a recorded nn.Module."""
    ev = as_baseline(analysis).events
    col = "module_type" if "module_type" in ev.columns else "module"
    return col in ev.columns and bool((ev[col].astype(str) != "").any())


def module_ranges_missing(analysis: Analysis | Baseline) -> str | None:
    """One line saying the trace has no module ranges and how to record them; None if it has them."""
    if has_module_ranges(analysis):
        return None
    b = as_baseline(analysis)
    return (
        f"{Path(b.source).name or 'the trace'} has no nn.Module ranges, so there is nothing to rank by "
        f"module: record them with `headroom profile WORKLOAD` (on by default), or around your own "
        f"profiling with headroom.profile.modules.record_module_ranges(model)"
    )


def _module_keys(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Innermost path, innermost class and enclosing classes ('/'-joined) of every event.

    Events from a plain table with only `module` paths (``M_0.Layer_0.Linear_0``) get their
    classes from the path's parts."""
    n = len(ev)
    empty = np.full(n, "", dtype=object)
    path = ev["module"].astype(str).to_numpy(dtype=object) if "module" in ev.columns else empty
    if "module_type" in ev.columns:
        mtype = ev["module_type"].astype(str).to_numpy(dtype=object)
        stack = ev["module_stack"].astype(str).to_numpy(dtype=object) if "module_stack" in ev.columns else mtype
        return path, mtype, stack
    classes = {
        p: [re.sub(r"_\d+$", "", x) for x in p.split(".") if x and not x.isdigit()] for p in set(path.tolist()) if p
    }
    mtype = np.array([classes[p][-1] if p else "" for p in path], dtype=object)
    stack = np.array([STACK_SEP.join(classes[p]) if p else "" for p in path], dtype=object)
    return path, mtype, stack


def _memberships(ev: pd.DataFrame, grouping: str, scope: str, known_paths: set[str]) -> tuple[np.ndarray, np.ndarray]:
    """(event index, group key) pairs: each event in its innermost module's group (`self`), or in
    the group of that module and of every module holding it (`total`), once per group."""
    path, mtype, stack = _module_keys(ev)
    inner = path if grouping == "module_path" else mtype
    if scope == "self":
        idx = np.flatnonzero(inner != "")
        return idx, inner[idx]
    codes, uniq = pd.factorize(pd.Series(path if grouping == "module_path" else stack, dtype=object))
    groups: list[list[str]] = []
    for u in uniq:
        if not u:
            groups.append([])
        elif grouping == "module_path":
            parts = u.split(".")
            prefixes = [".".join(parts[:k]) for k in range(1, len(parts) + 1)]
            groups.append([q for q in prefixes if q in known_paths or q == u])
        else:
            groups.append(list(dict.fromkeys(t for t in u.split(STACK_SEP) if t)))
    rows, keys = [], []
    for i, c in enumerate(codes.tolist()):
        for g in groups[c]:
            rows.append(i)
            keys.append(g)
    return np.array(rows, dtype=np.int64), np.array(keys, dtype=object)


def _call_stats(modules: pd.DataFrame | None, grouping: str, scope: str, num_steps: int) -> pd.DataFrame:
    """Per group: calls in the window, calls per step, CPU us per call, and the inputs seen."""
    cols = ["calls_total", "calls", "cpu_us_per_call", "inputs"]
    if modules is None or len(modules) == 0:
        return pd.DataFrame(columns=cols)
    key = modules["path"] if grouping == "module_path" else modules["module_type"]
    cpu = modules["self_us"] if scope == "self" else modules["dur"]
    df = pd.DataFrame(
        {
            "key": key.astype(str).to_numpy(),
            "cpu": cpu.to_numpy(dtype=float),
            "inputs": modules["inputs"].astype(str).to_numpy(),
        }
    )
    g = df.groupby("key", sort=False)
    out = pd.DataFrame({"calls_total": g.size(), "cpu_us_per_call": g["cpu"].mean()})
    out["calls"] = out["calls_total"] / max(num_steps, 1)
    seen = df[df["inputs"] != ""].groupby(["key", "inputs"], sort=False).size().reset_index(name="n")
    seen = seen.sort_values(["key", "n"], ascending=[True, False], kind="stable")
    out["inputs"] = pd.Series(
        {
            k: [{"inputs": i, "calls": int(n)} for i, n in zip(s["inputs"], s["n"])][:5]
            for k, s in seen.groupby("key", sort=False)
        }
    )
    return out[cols]


def module_targets(
    analysis: Analysis | Baseline,
    speedup: float = DEFAULT_SPEEDUP,
    grouping: str = "module",
    scope: str = "self",
    top: int | None = 20,
    replay_top: int = 0,
) -> pd.DataFrame:
    """nn.Module classes (``grouping="module"``) or instances (``"module_path"``) ranked by end-to-end gain.

    scope ``self``: a module's kernels are those whose innermost module it is (the groups
    split the kernel time: shares add up); ``total``: also every kernel of the modules inside
    it (``LlamaMLP`` holds its Linear layers and activation: what replacing the module
    replaces). Backward kernels count for the module of the forward op that created them.
    Rows: the columns of `targets` plus scope, calls (per profiled step), kernels_per_call
    (forward and backward kernels per forward call), cpu_us_per_call (CPU time inside the call,
    less the module calls inside it for ``self``), inputs (the recorded tensor shapes of the
    calls, most common first: ``[{"inputs": "bf16[4,2048,4096]", "calls": 96}]``),
    categories and phases (share of the row's kernel time per category, and per phase:
    forward, backward, optimizer).
    """
    if grouping not in MODULE_KINDS:
        raise UserError(f"unknown module grouping {grouping!r} (module, module_path)")
    if scope not in SCOPES:
        raise UserError(f"unknown module scope {scope!r}; use self or total")
    b = as_baseline(analysis)
    ev = b.events
    columns = _TARGET_COLUMNS + MODULE_COLUMNS
    if not has_module_ranges(b):
        return pd.DataFrame(columns=columns)
    # The distinct values first: iterating a text column yields a Python object per row.
    known = set(b.modules["path"].astype(str).unique()) if b.modules is not None and len(b.modules) else set()
    known |= set(ev["module"].astype(str).unique()) if "module" in ev.columns else set()
    rows, keys = _memberships(ev, grouping, scope, known)
    if len(rows) == 0:
        return pd.DataFrame(columns=columns)
    total = float(ev["dur"].sum())
    # Only the columns read below, and the groups as integer codes in order of first appearance (the order
    # groupby(sort=False) gives): each groupby of the text would hash every row's key anew.
    sub = ev[[c for c in _MODULE_READS if c in ev.columns]].iloc[rows].reset_index(drop=True)
    codes, names = factorized(keys)
    dur = sub["dur"].to_numpy(dtype=float)
    addr = (
        sub["addressable"].fillna(False).to_numpy(dtype=bool)
        if "addressable" in sub.columns
        else np.zeros(len(sub), dtype=bool)
    )
    category = sub["category"].astype(str).to_numpy() if "category" in sub.columns else np.full(len(sub), "other")
    agg = (
        pd.DataFrame({"key": codes, "dur": dur, "addr": np.where(addr, dur, 0.0)})
        .groupby("key", sort=False)
        .agg(us=("dur", "sum"), kernels=("dur", "size"), addressable_us=("addr", "sum"))
    )
    mix = _time_by(codes, category, dur, largest_first=True)
    phase = sub["phase"].astype(str).to_numpy() if "phase" in sub.columns else np.full(len(sub), "forward")
    phases = _time_by(codes, phase, dur, largest_first=False)
    t = agg.join(_amdahl_groups(Baseline(sub, b.wall_us, b.window, b.num_steps, b.n_devices), codes, speedup))
    t["category"] = [max(mix[k], key=mix[k].__getitem__) for k in t.index]
    t["categories"] = [{c: (u / us if us > 0 else 0.0) for c, u in mix[k].items()} for k, us in zip(t.index, t["us"])]
    t["phases"] = [{p: (u / us if us > 0 else 0.0) for p, u in phases[k].items()} for k, us in zip(t.index, t["us"])]
    t.index = pd.Index(names[t.index.to_numpy()].tolist(), name="key")
    t["name"] = t.index.astype(str)
    t["kind"] = grouping
    t["scope"] = scope
    t = _with_gains(t, b, total)
    stats = _call_stats(b.modules, grouping, scope, b.num_steps)
    t = t.join(stats)
    calls_total = pd.to_numeric(t["calls_total"], errors="coerce").to_numpy(dtype=float)
    t["kernels_per_call"] = np.where(
        calls_total > 0, t["kernels"].to_numpy(dtype=float) / np.where(calls_total > 0, calls_total, 1.0), np.nan
    )
    t["calls"] = pd.to_numeric(t["calls"], errors="coerce")
    t["cpu_us_per_call"] = pd.to_numeric(t["cpu_us_per_call"], errors="coerce")
    t["inputs"] = [v if isinstance(v, list) else [] for v in t["inputs"]]
    t = _ranked(t, columns, top)

    def members(name: str) -> np.ndarray:
        mask = np.zeros(len(ev), dtype=bool)
        mask[rows[keys == name]] = True
        return mask

    return _with_replay(t, b, speedup, replay_top, members)


def _time_by(
    codes: np.ndarray, labels: np.ndarray, dur: np.ndarray, largest_first: bool
) -> dict[int, dict[str, float]]:
    """Per group code, its kernel time per label (category, phase): the labels in order of first appearance,
    or with `largest_first` the longest first (ties in that order)."""
    sums = (
        pd.DataFrame({"key": codes, "label": labels, "dur": dur})
        .groupby(["key", "label"], sort=False)["dur"]
        .sum()
        .reset_index()
    )
    if largest_first:
        sums = sums.sort_values(["key", "dur"], ascending=[True, False], kind="stable")
    out: dict[int, dict[str, float]] = {}
    for k, label, u in zip(sums["key"].tolist(), sums["label"].tolist(), sums["dur"].tolist()):
        out.setdefault(k, {})[label] = float(u)
    return out


@dataclass
class Targets:
    """Ops (and modules) ranked by the end-to-end gain a faster kernel for each would give."""

    baseline: Baseline
    speedup: float
    table: pd.DataFrame
    notes: tuple[str, ...] = ()
    # With the roofline columns: the peaks they are measured against.
    device: Device | None = field(default=None, metadata=OMIT_NONE)

    # The ``headroom targets --json`` contract.
    JSON_KEYS: ClassVar[tuple[str | tuple[str, str], ...]] = (
        ("trace", "source"),
        "mode",
        "baseline_us",
        "per_step_us",
        "num_steps",
        "speedup",
        ("targets", "rows"),
        "notes",
        "device",
    )

    @property
    def source(self) -> str:
        return self.baseline.source

    @property
    def mode(self) -> str:
        return self.baseline.mode

    @property
    def baseline_us(self) -> float:
        return self.baseline.wall_us

    @property
    def per_step_us(self) -> float:
        return self.baseline.per_step_us

    @property
    def num_steps(self) -> int:
        return self.baseline.num_steps

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The ranking, one object per row (the module columns on module rows only)."""
        return target_rows(self.table)

    def to_frame(self) -> pd.DataFrame:
        """The ranking (columns as `targets()` documents them)."""
        return self.table.copy()


def rank_targets(
    analysis: Analysis | Baseline,
    speedup: float = DEFAULT_SPEEDUP,
    by: Sequence[str] = ("op", "module"),
    top: int | None = 20,
    replay_top: int = 0,
    scope: str = "self",
) -> Targets:
    """`targets()` as a result object; `notes` says when a module grouping found no module ranges."""
    b = as_baseline(analysis)
    missing = module_ranges_missing(b) if set(by) & set(MODULE_KINDS) else None
    return Targets(b, speedup, targets(b, speedup, by, top, replay_top, scope), (missing,) if missing else ())


def targets_dict(
    analysis: Analysis | Baseline, table: pd.DataFrame, speedup: float, notes: Sequence[str] = ()
) -> dict[str, Any]:
    """The ``headroom targets --json`` contract (docs/projection.md, docs/modules.md)."""
    b = as_baseline(analysis)
    return {
        "trace": b.source,
        "mode": b.mode,
        "baseline_us": b.wall_us,
        "per_step_us": b.per_step_us,
        "num_steps": b.num_steps,
        "speedup": speedup,
        "targets": target_rows(table),
        "notes": list(notes),
    }


def target_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """A targets table as one object per row, non-finite numbers as None, the module columns on module rows
    only."""

    def clean(v):
        if isinstance(v, (np.floating, float)):
            return None if not math.isfinite(float(v)) else float(v)
        if isinstance(v, np.integer):
            return int(v)
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    def row_dict(row: dict[str, Any]) -> dict[str, Any]:
        module_row = row.get("kind") in MODULE_KINDS
        return {c: clean(v) for c, v in row.items() if module_row or c not in MODULE_COLUMNS}

    return [row_dict(row) for row in table.to_dict(orient="records")]
