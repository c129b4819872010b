"""Several ranks of one distributed run, analysed together.

Each rank's trace is analysed on its own (:func:`headroom.trace.analysis.analyze`);
this module puts the ranks side by side and adds what only exists across ranks:

* **which rank a trace is**: Kineto's ``distributedInfo`` (written by every
  torch.profiler run with a process group: headroom, torchtitan, Lightning, HF
  Trainer), else headroom's manifest, else the file name (``rank-3``,
  ``rank3_trace.json``, ``rank_3``);
* **communication split** (:mod:`headroom.trace.comm`): on each rank, communication
  time that ran while the rank ran compute (*overlapped*) and the rest (*exposed*);
* **collectives**: the k-th collective of each name on every rank is the same
  collective. A rank's clock is aligned to the lowest rank's by the median
  difference of their collective end times (collectives end together on all
  ranks), so traces from different hosts compare;
* **waits and the straggler**: at each collective the ranks that arrived
  before the last one waited for it; the slowest rank is the one the others
  waited for longest;
* **the synchronised step**: collectives make every rank run at the pace of
  the slowest, so the step time the job experiences is the longest rank's.

docs/distributed.md explains each number and where it is checked against HTA.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headroom.datafiles import shipped
from headroom.errors import UserError
from headroom.jsonio import member
from headroom.trace.analysis import Analysis
from headroom.trace.comm import activity_segments, collectives, comm_split

# A rank number in a trace's file name (data/ranks.toml).
_RANK_IN_NAME = re.compile(shipped("ranks.toml")["rank_files"]["pattern"], re.IGNORECASE)


# --- which rank a trace is --------------------------------------------------------


@dataclass(frozen=True)
class RankId:
    rank: int
    world_size: int | None
    backend: str | None
    source: str  # distributedInfo | manifest | file name


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return None


def rank_id(a: Analysis) -> RankId | None:
    """The rank of a trace: Kineto's distributedInfo, headroom's manifest, else the file name."""
    info = a.metadata.get("distributedInfo")
    rank = _int(info.get("rank")) if isinstance(info, dict) else None
    if isinstance(info, dict) and rank is not None:
        backend = info.get("backend")
        return RankId(rank, _int(info.get("world_size")), str(backend) if backend else None, "distributedInfo")
    dist = member(a.manifest, "distributed")
    rank = _int(dist.get("rank"))
    if rank is not None:
        return RankId(rank, _int(dist.get("world_size")), dist.get("backend"), "manifest")
    m = _RANK_IN_NAME.search(Path(a.source).name)
    if m:
        return RankId(int(m.group(1)), None, None, "file name")
    return None


def rank_order(analyses: Sequence[Analysis]) -> list[int] | None:
    """The ranks of `analyses` when they are ranks of one run, else None.

    A rank set: two or more traces, every one with a rank, no rank twice, and (where
    the traces say) one world size larger than one. One-rank process groups (e.g. a
    DMP run on one GPU) say world size 1 and stay single traces.
    """
    if len(analyses) < 2:
        return None
    found = [rank_id(a) for a in analyses]
    ids = [i for i in found if i is not None]
    if len(ids) != len(found):
        return None
    worlds = {i.world_size for i in ids if i.world_size is not None}
    if worlds and (len(worlds) > 1 or worlds == {1}):
        return None
    ranks = [i.rank for i in ids]
    if len(set(ranks)) != len(ranks):
        return None
    return ranks


def repeated_ranks(analyses: Sequence[Analysis]) -> dict[int, list[str]]:
    """Ranks that more than one trace claims (multi-rank runs only), for a notice."""
    seen: dict[int, list[str]] = {}
    for a in analyses:
        i = rank_id(a)
        if i is not None and (i.world_size or 2) > 1:
            seen.setdefault(i.rank, []).append(Path(a.source).name)
    return {r: names for r, names in seen.items() if len(names) > 1}


# --- the rank set ------------------------------------------------------------------------


@dataclass
class RankSet:
    """The ranks of one distributed run, analysed together (docs/distributed.md)."""

    source: str
    ranks: list[int]
    analyses: list[Analysis]
    world_size: int | None
    backend: str | None
    parallel: str | None
    per_rank: pd.DataFrame  # one row per rank (see _PER_RANK_COLUMNS)
    categories: pd.DataFrame  # per category across ranks: min/median/max and the rank with the most
    steps: pd.DataFrame  # per step number: each rank's wall time, the slowest rank
    collectives: pd.DataFrame  # matched collectives, one row per (collective, rank)
    offsets: dict[int, float]  # per rank: add to its trace times to get the lowest rank's clock
    segments: dict[int, pd.DataFrame]
    warnings: list[str] = field(default_factory=list)

    @property
    def step_us(self) -> float:
        """The synchronised step: the longest rank's step time (collectives make every rank wait for it)."""
        return float(self.per_rank["step_us"].max()) if len(self.per_rank) else 0.0

    @property
    def slowest_rank(self) -> int:
        """The rank the others waited for longest at collectives (without waits: the longest step)."""
        pr = self.per_rank
        if len(pr) == 0:
            return -1
        if float(pr["waited_for_us"].max()) > 0:
            return int(pr.sort_values(["waited_for_us", "rank"], ascending=[False, True]).iloc[0]["rank"])
        return int(pr.sort_values(["step_us", "rank"], ascending=[False, True]).iloc[0]["rank"])

    def analysis(self, rank: int) -> Analysis:
        return self.analyses[self.ranks.index(rank)]

    @property
    def mode(self) -> str:
        return self.analyses[0].mode if self.analyses else ""

    def to_dict(self, all_kernels: bool = False) -> dict[str, Any]:
        """The `headroom classify --json` contract for a directory of ranks (docs/distributed.md)."""

        def rows(df: pd.DataFrame) -> list[dict[str, Any]]:
            return [{k: _plain(v) for k, v in r.items()} for r in df.to_dict(orient="records")]

        matched = self.collectives
        return {
            "source": self.source,
            "kind": "ranks",
            "mode": self.mode,
            "ranks": list(self.ranks),
            "world_size": self.world_size,
            "backend": self.backend,
            "parallel": self.parallel,
            "step_us": self.step_us,
            "slowest_rank": self.slowest_rank,
            "collectives": int(matched["key"].nunique()) if len(matched) else 0,
            "per_rank": rows(self.per_rank),
            "categories": rows(self.categories),
            "steps": rows(self.steps),
            "offsets_us": {str(r): float(o) for r, o in self.offsets.items()},
            "warnings": list(self.warnings),
            "rank_analyses": [a.to_dict(all_kernels=all_kernels) for a in self.analyses],
        }


def _plain(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return float(v) if np.isfinite(v) else None
    if isinstance(v, np.bool_):
        return bool(v)
    return v


_PER_RANK_COLUMNS = [
    "rank",
    "num_steps",
    "step_us",
    "wall_us",
    "busy_us",
    "idle_us",
    "idle_fraction",
    "total_us",
    "compute_busy_us",
    "comm_us",
    "comm_busy_us",
    "comm_overlapped_us",
    "comm_exposed_us",
    "comm_overlap_fraction",
    "wait_us",
    "waited_for_us",
    "addressable_us",
    "addressable_fraction",
]


def match_collectives(per_rank: dict[int, pd.DataFrame]) -> tuple[pd.DataFrame, list[str]]:
    """Join the ranks' collectives: the k-th of each name is the same collective on every rank.

    A name with a different count on some rank cannot be paired and is left out (a warning).
    Returns one row per (collective, rank) with key, name, seq, rank, ts, end, dur, stream.
    """
    warnings: list[str] = []
    ranks = sorted(per_rank)
    counts = pd.DataFrame({r: per_rank[r].groupby("name").size() for r in ranks}).fillna(0).astype(int)
    if counts.empty:
        return pd.DataFrame(columns=["key", "name", "seq", "rank", "ts", "end", "dur", "stream"]), warnings
    same = counts.nunique(axis=1) == 1
    for name in counts.index[~same]:
        per = ", ".join(f"rank {r}: {int(counts.at[name, r])}" for r in ranks)
        warnings.append(
            f"collective {name[:80]!r} ran a different number of times per rank ({per}): not paired across ranks"
        )
    keep = set(counts.index[same])
    frames = []
    for r in ranks:
        c = per_rank[r]
        c = c[c["name"].isin(keep)].assign(rank=r)
        frames.append(c)
    m = pd.concat(frames, ignore_index=True)
    m["key"] = m["name"].astype(str) + "#" + m["seq"].astype(str)
    return m[["key", "name", "seq", "rank", "ts", "end", "dur", "stream"]], warnings


def clock_offsets(matched: pd.DataFrame, ranks: Sequence[int], analyses: Sequence[Analysis]) -> dict[int, float]:
    """Per rank, what to add to its times to read them on the lowest rank's clock.

    Collectives end together on every rank, so the median difference of matched
    collective end times is the offset. Without collectives: the traces' own
    time bases (baseTimeNanoseconds), which agree on one host.
    """
    ref = ranks[0]
    offsets = {ref: 0.0}
    if len(matched):
        ends = matched.pivot(index="key", columns="rank", values="end")
        for r in ranks[1:]:
            offsets[r] = float(np.median(ends[ref] - ends[r]))
        return offsets
    base = {r: (getattr(a.trace, "base_ns", None) if a.trace is not None else None) for r, a in zip(ranks, analyses)}
    for r in ranks[1:]:
        here, there = base[r], base[ref]
        offsets[r] = (here - there) / 1000.0 if here is not None and there is not None else 0.0
    return offsets


def _waits(matched: pd.DataFrame, offsets: dict[int, float]) -> pd.DataFrame:
    """Per (collective, rank): aligned start/end, and how long the rank waited for the last to arrive."""
    m = matched.copy()
    off = m["rank"].map(offsets).to_numpy(dtype=float)
    m["aligned_ts"] = m["ts"].to_numpy(dtype=float) + off
    m["aligned_end"] = m["end"].to_numpy(dtype=float) + off
    last = m.groupby("key")["aligned_ts"].transform("max")
    m["wait_us"] = np.minimum(np.maximum(last - m["aligned_ts"], 0.0), m["dur"])
    # The last to arrive: the latest aligned start (lowest rank on ties).
    m["last"] = False
    if len(m):
        order = m.sort_values(["key", "aligned_ts", "rank"], ascending=[True, False, True])
        m.loc[order.drop_duplicates("key").index, "last"] = True
    return m


def rank_set(analyses: Sequence[Analysis], ranks: Sequence[int] | None = None, source: str = "") -> RankSet:
    """Analyse the ranks of one run together (ranks from the traces when not given)."""
    ranks = list(ranks) if ranks is not None else rank_order(analyses)
    if ranks is None:
        raise UserError(
            f"{source or 'traces'}: not the ranks of one run (each trace needs a rank: "
            f"distributedInfo, a headroom manifest or rank-K in its name, no rank twice)"
        )
    order = np.argsort(ranks, kind="stable")
    ranks = [int(ranks[i]) for i in order]
    analyses = [analyses[i] for i in order]
    warnings: list[str] = []
    modes = {a.mode for a in analyses}
    if len(modes) > 1:
        raise UserError(f"{source or 'traces'}: ranks mix GPU and CPU-only traces ({', '.join(sorted(modes))})")
    ids = [rank_id(a) for a in analyses]
    worlds = {i.world_size for i in ids if i and i.world_size}
    world = worlds.pop() if len(worlds) == 1 else None
    if world is not None and world != len(ranks):
        warnings.append(f"{len(ranks)} of {world} ranks")
    backends = {i.backend for i in ids if i and i.backend}
    manifests = [member(a.manifest, "distributed") for a in analyses if isinstance(a.manifest.get("distributed"), dict)]
    parallel = manifests[0].get("parallel") if manifests else None
    steps_seen = {a.num_steps for a in analyses}
    if len(steps_seen) > 1:
        warnings.append(
            "ranks have different numbers of profiled steps: "
            + ", ".join(f"rank {r}: {a.num_steps}" for r, a in zip(ranks, analyses))
        )
    for r, a in zip(ranks, analyses):
        if a.n_devices > 1:
            warnings.append(f"rank {r} ran on {a.n_devices} devices; its communication split merges them")

    segments = {r: activity_segments(a) for r, a in zip(ranks, analyses)}
    splits = {r: comm_split(a, segments[r]) for r, a in zip(ranks, analyses)}
    matched, w = match_collectives({r: collectives(a) for r, a in zip(ranks, analyses)})
    warnings.extend(w)
    offsets = clock_offsets(matched, ranks, analyses)
    matched = _waits(matched, offsets)
    wait = matched.groupby("rank")["wait_us"].sum() if len(matched) else pd.Series(dtype=float)
    # Time the others spent waiting at collectives where this rank arrived last.
    per_key_wait = matched.groupby("key")["wait_us"].sum() if len(matched) else pd.Series(dtype=float)
    last = matched[matched["last"]] if len(matched) else matched
    waited_for = (
        last.assign(w=last["key"].map(per_key_wait)).groupby("rank")["w"].sum() if len(last) else pd.Series(dtype=float)
    )

    rows = []
    for r, a in zip(ranks, analyses):
        s = splits[r]
        rows.append(
            {
                "rank": r,
                "num_steps": a.num_steps,
                "step_us": a.step_us,
                "wall_us": a.wall_us,
                "busy_us": a.busy_us,
                "idle_us": a.idle_us,
                "idle_fraction": a.idle_fraction,
                "total_us": a.total_us,
                "compute_busy_us": s.compute_busy_us,
                "comm_us": s.comm_us,
                "comm_busy_us": s.comm_busy_us,
                "comm_overlapped_us": s.overlapped_us,
                "comm_exposed_us": s.exposed_us,
                "comm_overlap_fraction": s.overlap_fraction,
                "wait_us": float(wait.get(r, 0.0)),
                "waited_for_us": float(waited_for.get(r, 0.0)),
                "addressable_us": a.addressable_us,
                "addressable_fraction": a.addressable_fraction,
            }
        )
    per_rank = pd.DataFrame(rows, columns=_PER_RANK_COLUMNS)
    return RankSet(
        source=source or (str(Path(analyses[0].source).parent) if analyses else ""),
        ranks=ranks,
        analyses=list(analyses),
        world_size=world,
        backend=backends.pop() if len(backends) == 1 else None,
        parallel=parallel,
        per_rank=per_rank,
        categories=category_spread(ranks, analyses),
        steps=step_spread(ranks, analyses),
        collectives=matched,
        offsets=offsets,
        segments=segments,
        warnings=warnings,
    )


def group_ranks(analyses: Sequence[Analysis], source: str = "") -> tuple[list[Analysis | RankSet], list[str]]:
    """A directory's analyses as `headroom` reads a directory: one RankSet when they are the ranks of one run,
    else each on its own; and the caveats to tell (the rank set's, or a rank that several traces claim)."""
    ranks = rank_order(analyses)
    if ranks is not None:
        rs = rank_set(analyses, ranks, source=source)
        devices = sorted({a.device_name for a in analyses})
        mixed = (
            [
                f"the ranks ran on {len(devices)} kinds of device ({', '.join(d or '(unnamed)' for d in devices)}): "
                f"the slowest rank may be the slower device"
            ]
            if len(devices) > 1
            else []
        )
        return [rs], list(rs.warnings) + mixed
    notes = []
    repeated = repeated_ranks(analyses)
    ids = [rank_id(a) for a in analyses]
    worlds = sorted({i.world_size for i in ids if i is not None and i.world_size is not None})
    if repeated:
        rank, names = next(iter(sorted(repeated.items())))
        notes.append(
            f"rank {rank} has {len(names)} traces ({', '.join(names[:3])}): "
            f"analysed one by one, not as the ranks of one run"
        )
    elif len(analyses) > 1 and all(i is not None for i in ids) and len(worlds) > 1:
        notes.append(
            f"the traces say world sizes {', '.join(map(str, worlds))}: not the ranks of one run, analysed one by one"
        )
    return list(analyses), notes


def category_spread(ranks: Sequence[int], analyses: Sequence[Analysis]) -> pd.DataFrame:
    """Per category: min, median and max time (and fraction of each rank's total) across ranks, and the
    rank with the most. A rank without the category counts 0."""
    cols = [
        "name",
        "addressable",
        "min_us",
        "median_us",
        "max_us",
        "min_fraction",
        "median_fraction",
        "max_fraction",
        "max_rank",
    ]
    us: dict[str, dict[int, float]] = {}
    frac: dict[str, dict[int, float]] = {}
    addressable: dict[str, bool] = {}
    for r, a in zip(ranks, analyses):
        for c in a.categories.itertuples(index=False):
            us.setdefault(c.name, {})[r] = float(c.us)
            frac.setdefault(c.name, {})[r] = float(c.fraction)
            addressable[c.name] = bool(c.addressable)
    rows = []
    for name in us:
        u = np.array([us[name].get(r, 0.0) for r in ranks])
        f = np.array([frac[name].get(r, 0.0) for r in ranks])
        rows.append(
            (
                name,
                addressable[name],
                float(u.min()),
                float(np.median(u)),
                float(u.max()),
                float(f.min()),
                float(np.median(f)),
                float(f.max()),
                int(ranks[int(np.argmax(u))]),
            )
        )
    t = pd.DataFrame(rows, columns=cols)
    return t.sort_values(["median_us", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)


def step_spread(ranks: Sequence[int], analyses: Sequence[Analysis]) -> pd.DataFrame:
    """Per step number: each rank's wall time for it (columns ``rank_K``), the longest and its rank."""
    walls = {r: a.steps.set_index("step")["wall_us"] for r, a in zip(ranks, analyses)}
    t = pd.DataFrame({f"rank_{r}": w for r, w in walls.items()}).sort_index()
    t.index.name = "step"
    t = t.reset_index()
    vals = t[[f"rank_{r}" for r in ranks]].to_numpy(dtype=float)
    t["max_us"] = np.nanmax(vals, axis=1) if len(t) else []
    t["slowest_rank"] = [int(ranks[int(np.nanargmax(v))]) for v in vals] if len(t) else []
    return t
