"""Two runs of one workload side by side: the step time and where it changed.

`diff(before, after, by)` takes two analysed traces (or two directories of ranks, each one run) and
gives the end-to-end step times, profiled and unprofiled where the manifests record them, and one row
per category, op, module class or kernel with its time per step before and after, the change and the
row's share of the whole change. Rows add up: the kernel-time deltas of the rows sum to the change of
total GPU time per step, and (one trace per side) the busy-time deltas plus the idle delta sum to the
change of the step time, which is what the waterfall draws.

Kernels are matched by name and launch site (the launching op and module class); Inductor's Triton
kernels, whose names change from one compile to the next, are matched as one row per launch site
(`triton_*`). A module class that vanished and one that appeared at exactly the same instance paths
(a module swapped for a candidate's `ModelNew`) are one row, `LlamaRMSNorm -> ModelNew`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Union

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.jsonio import encoded
from headroom.trace.analysis import Analysis

if TYPE_CHECKING:  # a single trace's diff imports none of the rank-set modules
    from headroom.trace.rank_set import RankSet

Run = Union[Analysis, "RankSet"]
GROUPINGS = ("category", "op", "module", "kernel")
STATUSES = ("same", "added", "removed", "replaced")
ROW_COLUMNS = [
    "key",
    "name",
    "category",
    "status",
    "before_us",
    "after_us",
    "delta_us",
    "share",
    "before_kernels",
    "after_kernels",
    "before_wall_us",
    "after_wall_us",
    "delta_wall_us",
]
IDLE = "(idle)"
NO_KEY = {"op": "(no op)", "module": "(no module)"}
TRITON = re.compile(r"^triton_")
_SEP = " @ "


@dataclass(frozen=True)
class StepTimes:
    """Step times (µs) of the two runs on one clock, and the speedup `before / after` (> 1: faster)."""

    clock: str  # profiled | unprofiled
    before_us: float
    after_us: float

    JSON_KEYS: ClassVar[tuple[str, ...]] = ("clock", "before_us", "after_us", "speedup", "change")

    @property
    def speedup(self) -> float:
        return self.before_us / self.after_us if self.after_us > 0 else math.nan

    @property
    def change(self) -> float:
        """`after / before - 1`: the fraction the step got slower (negative: faster)."""
        return self.after_us / self.before_us - 1.0 if self.before_us > 0 else math.nan


@dataclass
class Diff:
    """`headroom diff`: the step times and the rows (`ROW_COLUMNS`, largest change first)."""

    before: str
    after: str
    labels: tuple[str, str]
    by: str
    mode: str
    num_steps: tuple[int, int]
    profiled: StepTimes
    unprofiled: StepTimes | None
    rows: pd.DataFrame
    # all kernel time per step (the rows' sums)
    kernel_us: tuple[float, float] = field(metadata=encoded(lambda t: _before_after(*t)))
    # idle per step (one trace per side), else None
    idle_us: tuple[float, float] | None = field(metadata=encoded(lambda t: _before_after(*t)))
    notes: list[str] = field(default_factory=list)

    # `headroom diff --json` (docs/cli.md): the leading clock's step first.
    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "before",
        "after",
        "labels",
        "by",
        "mode",
        "num_steps",
        "step",
        "profiled",
        "unprofiled",
        "kernel_us",
        "idle_us",
        "rows",
        "notes",
    )

    @property
    def step(self) -> StepTimes:
        """The leading clock: unprofiled where both runs record it, else profiled."""
        return self.unprofiled or self.profiled

    def slower_than(self, pct: float) -> bool:
        """Whether the after run's step is slower than the before run's by more than `pct` percent."""
        return self.step.change * 100.0 > pct

    def to_frame(self) -> pd.DataFrame:
        return self.rows.copy()

    def waterfall(self) -> pd.DataFrame:
        """What the waterfall figure draws: from the before step, each row's busy-time delta and the idle
        delta, to the after step (profiled clock, ms). Rows of under 0.5% of the step are summed as one."""
        return waterfall_table(self)

    def figure(self):
        """The waterfall of `waterfall()` as a matplotlib Figure (what `headroom diff --figure` writes), titled
        with the two runs' labels (the same workload: "after vs before") and the rows' grouping."""
        from headroom.report.plot import waterfall_figure

        same = self.labels[0] == self.labels[1]
        runs = f"{self.labels[0]}: after vs before" if same else f"{self.labels[1]} vs {self.labels[0]}"
        return waterfall_figure(self.waterfall(), title=f"{runs}, by {self.by}")


def _before_after(before_us: float, after_us: float) -> dict[str, float]:
    """A per-step time of both runs, as `diff --json` writes it: the two and their difference."""
    return {"before_us": before_us, "after_us": after_us, "delta_us": after_us - before_us}


# --- the two runs -----------------------------------------------------------------


@dataclass(frozen=True)
class _Side:
    source: str
    label: str
    workload: str
    mode: str
    num_steps: int
    step_us: float
    unprofiled_us: float | None
    idle_us: float | None
    events: pd.DataFrame  # every rank's events; `per` divides their sums into per-step times
    per: np.ndarray  # per event: 1 / its rank's number of steps
    ranks: int = 0  # a directory of ranks: how many; 0: one trace


def _side(run: Run) -> _Side:
    if not isinstance(run, Analysis):  # a RankSet
        analyses = run.analyses
        unprofiled = [a.unprofiled_step_us for a in analyses]
        known = [u for u in unprofiled if u is not None]
        step_un = max(known) if known and len(known) == len(unprofiled) else None
        events = pd.concat([a.events for a in analyses], ignore_index=True)
        per = np.concatenate([np.full(len(a.events), 1.0 / max(a.num_steps, 1)) for a in analyses])
        first = analyses[0]
        return _Side(
            run.source,
            f"{first.label} ({len(analyses)} ranks)",
            str(first.manifest.get("workload") or ""),
            run.mode,
            int(first.num_steps),
            run.step_us,
            step_un,
            None,
            events,
            per,
            len(analyses),
        )
    n = max(run.num_steps, 1)
    return _Side(
        run.source,
        run.label,
        str(run.manifest.get("workload") or ""),
        run.mode,
        int(run.num_steps),
        run.step_us,
        run.unprofiled_step_us,
        run.idle_us / n,
        run.events,
        np.full(len(run.events), 1.0 / n),
    )


def _keys(ev: pd.DataFrame, by: str) -> np.ndarray:
    def col(name: str) -> np.ndarray:
        if name not in ev.columns:
            return np.full(len(ev), "", dtype=object)
        return ev[name].astype(object).where(ev[name].notna(), "").astype(str).to_numpy(dtype=object)

    if by == "category":
        return col("category")
    if by in ("op", "module"):
        v = col("op" if by == "op" else "module_type")
        return np.where(v == "", NO_KEY[by], v)
    name, op, mtype = col("name"), col("op"), col("module_type")
    name = np.where([bool(TRITON.match(n)) for n in name], "triton_*", name)
    return np.array([f"{n}{_SEP}{o or '-'}{_SEP}{m or '-'}" for n, o, m in zip(name, op, mtype)], dtype=object)


def _grouped(s: _Side, by: str) -> pd.DataFrame:
    ev = s.events
    keys = _keys(ev, by)
    dur = ev["dur"].to_numpy(dtype=float) * s.per
    wall = (ev["wall_us"].to_numpy(dtype=float) if "wall_us" in ev.columns else ev["dur"].to_numpy(dtype=float)) * s.per
    cat = ev["category"].astype(str).to_numpy(dtype=object) if "category" in ev.columns else np.full(len(ev), "other")
    df = pd.DataFrame({"key": keys, "us": dur, "wall": wall, "n": s.per, "category": cat})
    g = df.groupby("key", sort=False).agg(us=("us", "sum"), wall=("wall", "sum"), kernels=("n", "sum"))
    top = (
        df.groupby(["key", "category"], sort=False)["us"]
        .sum()
        .reset_index()
        .sort_values("us", ascending=False, kind="stable")
        .drop_duplicates("key")
        .set_index("key")["category"]
    )
    g["category"] = top
    return g


def _module_paths(s: _Side) -> dict[str, frozenset[str]]:
    ev = s.events
    if "module_type" not in ev.columns or "module" not in ev.columns:
        return {}
    pairs = ev[["module_type", "module"]].astype(str).drop_duplicates()
    return {t: frozenset(g["module"]) for t, g in pairs.groupby("module_type", sort=False) if t}


def _replacements(before: _Side, after: _Side, gone: set[str], new: set[str]) -> dict[str, str]:
    """Module classes of `before` only -> the class of `after` only that runs at exactly their paths."""
    pb, pa = _module_paths(before), _module_paths(after)
    by_paths = {pa[t]: t for t in new if t in pa}
    return {t: by_paths[pb[t]] for t in gone if t in pb and pb[t] in by_paths}


def _check(before: _Side, after: _Side, by: str) -> None:
    if by not in GROUPINGS:
        raise UserError(f"--by: unknown grouping {by!r} ({', '.join(GROUPINGS)})")
    if before.mode != after.mode:
        raise UserError(
            f"{after.source}: a {after.mode} trace against a {before.mode} trace "
            f"({before.source}): diff compares two runs of one kind"
        )
    if before.ranks != after.ranks:
        # per-step times are summed over a directory's ranks: against one trace, or another number of
        # ranks, the sums are of different things (a 4-rank run is no 11x slower than one of its ranks)
        def what(s: _Side) -> str:
            return f"a directory of {s.ranks} ranks" if s.ranks else "a single trace"

        raise UserError(
            f"{after.source}: {what(after)} against {what(before)} ({before.source}): diff compares "
            f"two traces, or two directories of the same number of ranks"
        )
    if before.workload and after.workload and before.workload != after.workload:
        raise UserError(
            f"{after.source}: workload {after.workload!r}, but {before.source} is {before.workload!r}: "
            f"diff compares two runs of one workload"
        )


def diff(before: Run, after: Run, by: str = "category") -> Diff:
    """The two runs compared (`by`: category, op, module or kernel); see the module's docstring."""
    b, a = _side(before), _side(after)
    _check(b, a, by)
    gb, ga = _grouped(b, by), _grouped(a, by)
    replaced: dict[str, str] = {}
    if by == "module":
        replaced = _replacements(b, a, set(gb.index) - set(ga.index), set(ga.index) - set(gb.index))
        ga = ga.rename(index={new: old for old, new in replaced.items()})
    keys = list(dict.fromkeys([*gb.index, *ga.index]))
    gb, ga = gb.reindex(keys), ga.reindex(keys)
    rows = pd.DataFrame({"key": keys})
    rows["name"] = [f"{k} -> {replaced[k]}" if k in replaced else k.split(_SEP)[0] for k in keys]
    rows["category"] = gb["category"].fillna(ga["category"]).fillna("").to_numpy(dtype=object)
    for side, g in (("before", gb), ("after", ga)):
        rows[f"{side}_us"] = g["us"].fillna(0.0).to_numpy(dtype=float)
        rows[f"{side}_kernels"] = g["kernels"].fillna(0.0).to_numpy(dtype=float)
        rows[f"{side}_wall_us"] = g["wall"].fillna(0.0).to_numpy(dtype=float)
    had, has = gb["us"].notna().to_numpy(), ga["us"].notna().to_numpy()
    rows["status"] = np.where(
        [k in replaced for k in keys], "replaced", np.where(had & has, "same", np.where(has, "added", "removed"))
    )
    rows["delta_us"] = rows["after_us"] - rows["before_us"]
    rows["delta_wall_us"] = rows["after_wall_us"] - rows["before_wall_us"]
    kb, ka = float(rows["before_us"].sum()), float(rows["after_us"].sum())
    rows["share"] = rows["delta_us"] / (ka - kb) if ka != kb else 0.0
    rows = rows.reindex(rows["delta_us"].abs().sort_values(ascending=False, kind="stable").index)
    rows = rows[ROW_COLUMNS].reset_index(drop=True)
    unprofiled = (
        StepTimes("unprofiled", b.unprofiled_us, a.unprofiled_us)
        if b.unprofiled_us is not None and a.unprofiled_us is not None
        else None
    )
    idle = (b.idle_us, a.idle_us) if b.idle_us is not None and a.idle_us is not None else None
    notes = []
    if unprofiled is None:
        notes.append("no unprofiled step time in both manifests: the profiled steps are compared")
    return Diff(
        before=b.source,
        after=a.source,
        labels=(b.label, a.label),
        by=by,
        mode=b.mode,
        num_steps=(b.num_steps, a.num_steps),
        profiled=StepTimes("profiled", b.step_us, a.step_us),
        unprofiled=unprofiled,
        rows=rows,
        kernel_us=(kb, ka),
        idle_us=idle,
        notes=notes,
    )


def waterfall_table(d: Diff, min_share: float = 0.005) -> pd.DataFrame:
    """Bars from the profiled before step to the after step (ms): `label`, `kind` (start, delta, end),
    `start_ms`, `delta_ms` (the bar runs from start to start + delta). Busy-time deltas per row plus
    the idle delta; rows under `min_share` of the before step are summed as "other rows"."""
    before, after = d.profiled.before_us, d.profiled.after_us
    r = d.rows
    small = r["delta_wall_us"].abs() < min_share * before
    items = [(n, float(v)) for n, v in zip(r.loc[~small, "name"], r.loc[~small, "delta_wall_us"])]
    if small.any():
        items.append((f"{int(small.sum())} other rows", float(r.loc[small, "delta_wall_us"].sum())))
    if d.idle_us is not None:
        items.append((IDLE, d.idle_us[1] - d.idle_us[0]))
    out = [{"label": "before", "kind": "start", "start_ms": 0.0, "delta_ms": before / 1e3}]
    level = before
    for name, v in items:
        out.append({"label": name, "kind": "delta", "start_ms": level / 1e3, "delta_ms": v / 1e3})
        level += v
    out.append({"label": "after", "kind": "end", "start_ms": 0.0, "delta_ms": after / 1e3})
    return pd.DataFrame(out)
