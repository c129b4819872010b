"""Projection across ranks: a kernel speedup projects per rank, then through the collectives.

Single-rank projections (:mod:`headroom.projection.projection`) shorten kernels on
one timeline. On several ranks a faster kernel only helps where it shortens the
path to a collective of the rank everyone waits for: a collective ends when the
last rank reaches it. The synchronised model (docs/distributed.md):

* **per rank**, the non-communication work is compressed as Amdahl does on one
  rank: at each instant the running work splits it evenly, and a selected
  event's share shrinks by ``1 - 1/s``; idle time between work stays. ``C_r(t)``
  maps a measured time on rank r to its projected time.
* **collectives**, in the order they end: rank r *arrives* at collective k at
  ``C_r(start)``, or when the previous collective on its stream ends, when it
  was queued behind it. The collective ends on rank r at the last rank's
  arrival plus the time it took after that arrival in the measurement (the
  transfer; clocks aligned as in :mod:`headroom.trace.rank_set`).
* **waiting for a collective**: where a rank's work stopped and resumed right
  after a collective ended (the last collective ending in that idle gap), the
  rank was waiting for it. In the projection it resumes at the later of
  ``C_r(when its work stopped)`` and the collective's projected end, and
  everything after moves with it. Idle that no collective ended is held.
* **the step** is the longest rank's projected window (each rank's window ends
  no earlier than its last collective), so speeding up a rank that waits at
  every collective gains nothing.

With no speedup the model reproduces the measured windows (``identity_error_us``
says how far it is, from clock alignment); gains are taken against that.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.jsonio import SKIP, encoded
from headroom.projection.amdahl import amdahl
from headroom.projection.matching import EntryResult, resolve
from headroom.projection.problems import ProblemMap, load_problems
from headroom.projection.speedups import Speedup
from headroom.trace.comm import merged
from headroom.trace.rank_set import RankSet

BACK_TO_BACK_US = 4.0  # a collective starting this soon after the previous one on its stream was queued behind it


@dataclass
class _Collective:
    key: str
    ts: float
    end: float
    stream: str
    prev_end: float | None  # measured end of the previous collective on the same stream
    queued: bool
    blocks_from: float | None  # when the rank's work stopped before waiting for this collective
    prev_key: str | None = None  # that previous collective (ranks can run them on other streams or orders)
    # Measured time from the last rank's arrival to this rank's end (aligned clocks). Negative where the
    # alignment puts the end before that arrival: kept, so that with no speedup the model is the measurement.
    transfer: float = 0.0


@dataclass
class _RankModel:
    rank: int
    offset: float
    w0: float
    w1: float
    num_steps: int
    seg_ts: np.ndarray  # non-communication work segments (event index in seg_event)
    seg_end: np.ndarray
    seg_event: np.ndarray
    seg_stream: np.ndarray  # the GPU stream (CPU thread) each segment ran on
    collectives: dict[str, _Collective] = field(default_factory=dict)


@dataclass
class SyncModel:
    """What the synchronised projection needs from a rank set, computed once."""

    ranks: list[int]
    models: dict[int, _RankModel]
    order: list[str]  # collective keys in the order they end
    n_events: dict[int, int]
    _identity: dict[int, float] | None = None

    def identity(self) -> dict[int, float]:
        """Projected windows with no speedup (computed once)."""
        if self._identity is None:
            self._identity = _run(self, {r: np.ones(self.n_events[r]) for r in self.ranks})
        return self._identity

    @classmethod
    def from_rank_set(cls, rs: RankSet) -> SyncModel:
        models: dict[int, _RankModel] = {}
        matched = rs.collectives
        for r, a in zip(rs.ranks, rs.analyses):
            seg = rs.segments[r]
            work = ~seg["comm"].to_numpy(dtype=bool)
            sts, sen = seg["ts"].to_numpy(dtype=float)[work], seg["end"].to_numpy(dtype=float)[work]
            sev = seg["event"].to_numpy()[work]
            streams = (a.events["device"].astype(str) + "/" + a.events["stream"].astype(str)).to_numpy()
            m = _RankModel(
                r,
                float(rs.offsets.get(r, 0.0)),
                float(a.window[0]),
                float(a.window[1]),
                int(a.num_steps),
                sts,
                sen,
                sev,
                streams[sev] if len(sev) else np.zeros(0, dtype=object),
            )
            mine = matched[matched["rank"] == r].sort_values(["ts", "end"], kind="stable") if len(matched) else matched
            last_on_stream: dict[str, tuple[float, str]] = {}
            for c in mine.itertuples(index=False):
                prev, prev_key = last_on_stream.get(c.stream, (None, None))
                queued = prev is not None and 0.0 <= float(c.ts) - prev <= BACK_TO_BACK_US
                m.collectives[c.key] = _Collective(
                    c.key, float(c.ts), float(c.end), c.stream, prev, queued, None, prev_key
                )
                if prev is None or float(c.end) >= prev:
                    last_on_stream[c.stream] = (float(c.end), c.key)
            _mark_blockers(m)
            models[r] = m
        order: list[str] = []
        if len(matched):
            off = matched["rank"].map(rs.offsets).astype(float)
            ends = (matched["end"] + off).groupby(matched["key"]).median()
            starts = (matched["ts"] + off).groupby(matched["key"]).max()
            key_order = pd.DataFrame({"end": ends, "start": starts}).sort_values(["end", "start"], kind="stable")
            order = key_order.index.tolist()
            for key in order:
                last = float(starts[key])
                for m in models.values():
                    c = m.collectives[key]
                    c.transfer = c.end + m.offset - last
        return cls(list(rs.ranks), models, order, {r: len(a.events) for r, a in zip(rs.ranks, rs.analyses)})


def _mark_blockers(m: _RankModel) -> None:
    """The collectives a rank waited for: the last one to end in each idle gap of its work, and any
    after whose end work started at once on a stream that had just run dry (a stream wait with no gap)."""
    _mark_stream_waits(m)
    ws, we = merged(m.seg_ts, m.seg_end)
    # The window end resumes too (the step cannot end before what it waited for).
    ws = np.append(ws, m.w1)
    we = np.append(we, m.w1)
    if not m.collectives:
        return
    keys = list(m.collectives)
    ends = np.array([m.collectives[k].end for k in keys])
    j = np.searchsorted(ws, ends, side="left")  # the work interval that resumes after each end
    gap_start = np.where(j > 0, we[np.maximum(j - 1, 0)], m.w0)
    in_gap = (j < len(ws)) & (ends >= gap_start)
    best: dict[int, int] = {}
    for i in np.flatnonzero(in_gap).tolist():
        if j[i] not in best or ends[i] > ends[best[j[i]]]:
            best[int(j[i])] = i
    for _gap, i in best.items():
        m.collectives[keys[i]].blocks_from = float(gap_start[i])


def _mark_stream_waits(m: _RankModel) -> None:
    if not m.collectives or len(m.seg_ts) == 0:
        return
    order = np.lexsort((m.seg_end, m.seg_ts))
    ts, end, stream = m.seg_ts[order], m.seg_end[order], m.seg_stream[order]
    prev_end = np.full(len(ts), -np.inf)
    last: dict[str, float] = {}
    for i, st in enumerate(stream.tolist()):
        prev_end[i] = last.get(st, -np.inf)
        last[st] = max(last.get(st, -np.inf), end[i])
    for c in m.collectives.values():
        k0, k1 = np.searchsorted(ts, [c.end, c.end + BACK_TO_BACK_US], side="left")
        for i in range(k0, min(k1 + 1, len(ts))):
            if c.end <= ts[i] <= c.end + BACK_TO_BACK_US and prev_end[i] <= c.end and np.isfinite(prev_end[i]):
                c.blocks_from = float(prev_end[i])
                break


def _saving_curve(ts: np.ndarray, end: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """F(t): work time saved by t when each instant is split evenly among the running segments and a
    segment's part shrinks by w = 1 - 1/s. Returned as breakpoints and values (F is piecewise linear)."""
    keep = (end > ts) & (w != 0)
    n_all = len(ts)
    if n_all == 0:
        return np.array([0.0]), np.array([0.0])
    t = np.concatenate([ts, end])
    dc = np.concatenate([np.ones(n_all), -np.ones(n_all)])
    dw = np.concatenate([np.where(keep, w, 0.0), -np.where(keep, w, 0.0)])
    order = np.argsort(t, kind="stable")
    t = t[order]
    count = np.cumsum(dc[order])[:-1]
    weight = np.cumsum(dw[order])[:-1]
    rate = np.where(count > 0.5, np.clip(weight, 0.0, None) / np.maximum(count, 1.0), 0.0)
    F = np.concatenate([[0.0], np.cumsum(np.diff(t) * np.minimum(rate, 1.0))])
    return t, F


class _Timeline:
    """C_r(t) = t - F_r(t) + J_r(t) for one rank, with J the shifts from waits, added in time order."""

    def __init__(self, m: _RankModel, factors: np.ndarray):
        f = factors[m.seg_event] if len(m.seg_event) else np.zeros(0)
        w = np.where(np.isinf(f), 1.0, 1.0 - 1.0 / f)
        self.t, self.F = _saving_curve(m.seg_ts, m.seg_end, w)
        self.jump_t: list[float] = []
        self.jump_sum: list[float] = []

    def saved(self, t: float) -> float:
        return float(np.interp(t, self.t, self.F))

    def shift(self, t: float) -> float:
        k = bisect.bisect_right(self.jump_t, t)
        return self.jump_sum[k - 1] if k else 0.0

    def at(self, t: float) -> float:
        return t - self.saved(t) + self.shift(t)

    def add_jump(self, t: float, inc: float) -> None:
        if self.jump_t and t < self.jump_t[-1]:
            t = self.jump_t[-1]  # keep the step function in time order (collectives are taken by end time)
        self.jump_t.append(t)
        self.jump_sum.append((self.jump_sum[-1] if self.jump_sum else 0.0) + inc)


@dataclass
class SyncResult:
    baseline_us: float  # the synchronised window: the longest rank's
    projected_us: float
    identity_us: float  # the model with no speedup (equals baseline_us up to clock alignment)
    per_rank: dict[int, tuple[float, float]]  # rank -> (measured window, projected window)
    num_steps: int = field(metadata=SKIP)

    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "baseline_us",
        "projected_us",
        "per_step_us",
        "baseline_per_step_us",
        "gain",
        "speedup",
        "identity_error_us",
        "per_rank",
    )
    JSON_META: ClassVar[dict[str, dict[str, Any]]] = {
        "per_rank": encoded(lambda d: [{"rank": r, "measured_us": a, "projected_us": b} for r, (a, b) in d.items()])
    }

    @property
    def gain(self) -> float:
        return 1.0 - self.projected_us / self.baseline_us if self.baseline_us > 0 else 0.0

    @property
    def per_step_us(self) -> float:
        return self.projected_us / self.num_steps

    @property
    def baseline_per_step_us(self) -> float:
        return self.baseline_us / self.num_steps

    @property
    def speedup(self) -> float | None:
        return self.baseline_us / self.projected_us if self.projected_us > 0 else None

    @property
    def identity_error_us(self) -> float:
        return self.identity_us - self.baseline_us


def _run(model: SyncModel, factors: dict[int, np.ndarray]) -> dict[int, float]:
    """Projected window length per rank."""
    tl = {r: _Timeline(model.models[r], factors[r]) for r in model.ranks}
    end_of: dict[int, dict[str, float]] = {r: {} for r in model.ranks}  # projected end per collective
    max_end = {r: -math.inf for r in model.ranks}
    for key in model.order:
        arrive = {}
        for r in model.ranks:
            m, c = model.models[r], model.models[r].collectives[key]
            a = tl[r].at(c.ts)
            if c.prev_key is not None and c.prev_end is not None:
                # Not before the previous collective on its stream ends (taken in another order across
                # ranks, it may not be projected yet: then its end moves with the rank's timeline).
                prev = end_of[r].get(c.prev_key)
                if prev is None:
                    prev = tl[r].at(c.prev_end)
                a = max(a, prev + ((c.ts - c.prev_end) if c.queued else 0.0))
            arrive[r] = a + m.offset
        last = max(arrive.values())
        for r in model.ranks:
            m, c = model.models[r], model.models[r].collectives[key]
            end = max(last - m.offset + c.transfer, arrive[r] - m.offset)  # never before it started
            end_of[r][key] = end
            max_end[r] = max(max_end[r], end)
            if c.blocks_from is not None:
                resume = max(tl[r].at(c.blocks_from), end)
                tl[r].add_jump(c.end, resume - tl[r].at(c.end))
    out = {}
    for r in model.ranks:
        m = model.models[r]
        out[r] = max(tl[r].at(m.w1), max_end[r]) - m.w0
    return out


def sync_projection(model: SyncModel, factors: dict[int, np.ndarray] | None = None) -> SyncResult:
    """The synchronised step with per-rank, per-event speedup factors (1 = unchanged, inf = no time)."""
    ones = {r: np.ones(model.n_events[r]) for r in model.ranks}
    factors = factors or ones
    for r in model.ranks:
        f = factors.get(r, ones[r])
        if f.shape != (model.n_events[r],):
            raise ValueError(f"rank {r}: factors has shape {f.shape}, expected ({model.n_events[r]},)")
        if np.any(~(f > 0)):
            raise UserError("speedup factors must be > 0")
    measured = {r: model.models[r].w1 - model.models[r].w0 for r in model.ranks}
    identity = model.identity()
    projected = _run(model, {r: factors.get(r, ones[r]) for r in model.ranks})
    base = max(measured.values())
    ident = max(identity.values())
    # Take gains against the model's own no-change answer, so clock-alignment error cancels.
    shift = base - ident
    per_rank = {r: (measured[r], projected[r] + (measured[r] - identity[r])) for r in model.ranks}
    steps = max((model.models[r].num_steps for r in model.ranks), default=1) or 1
    return SyncResult(base, max(projected.values()) + shift, ident, per_rank, steps)


# --- the `project` answer for a rank set --------------------------------------------


@dataclass
class RanksProjection:
    source: str
    ranks: list[int]
    on_ranks: list[int]
    speedups: SyncResult
    zero_time: SyncResult
    # Each rank projected alone (no synchronisation).
    per_rank_amdahl: dict[int, dict[str, float]] = field(
        metadata=encoded(lambda d: [{"rank": r, **v} for r, v in d.items()])
    )
    entries: dict[int, list[EntryResult]] = field(metadata=encoded(lambda d: {str(r): e for r, e in d.items()}))
    warnings: list[str]

    # The ``headroom project --json`` contract for a rank set.
    JSON_KEYS: ClassVar[tuple[str, ...]] = (
        "source",
        "kind",
        "ranks",
        "on_ranks",
        "synchronised",
        "per_rank_amdahl",
        "entries",
        "warnings",
    )
    kind: ClassVar[str] = "ranks"

    @property
    def synchronised(self) -> dict[str, SyncResult]:
        return {"speedups": self.speedups, "zero_time": self.zero_time}


def project_ranks(
    rs: RankSet,
    entries: Sequence[Speedup],
    on_ranks: Sequence[int] | None = None,
    problems: ProblemMap | None = None,
    strict: bool = False,
    model: SyncModel | None = None,
) -> RanksProjection:
    """Speedup entries applied on every rank (or only `on_ranks`), projected through the collectives."""
    if not entries:
        raise UserError("nothing to project: give --speedup SELECTOR=FACTOR or --speedups FILE")
    on = list(rs.ranks) if not on_ranks else sorted(set(int(r) for r in on_ranks))
    unknown = [r for r in on if r not in rs.ranks]
    if unknown:
        raise UserError(f"--on-rank {unknown[0]}: not a rank here (ranks: {', '.join(map(str, rs.ranks))})")
    problems = problems or load_problems()
    model = model or SyncModel.from_rank_set(rs)
    factors, zero, amd, ent = {}, {}, {}, {}
    warnings: list[str] = []
    for r, a in zip(rs.ranks, rs.analyses):
        n = len(a.events)
        if r not in on:
            factors[r] = zero[r] = np.ones(n)
            continue
        res = resolve(list(entries), a.events, problems, strict=strict)
        warnings.extend(f"rank {r}: {w}" for w in res.warnings)
        factors[r] = res.factors
        zero[r] = np.where(res.selected, np.inf, 1.0)
        p = amdahl(a, res.factors)
        amd[r] = {"baseline_us": p.baseline_us, "projected_us": p.projected_us, "gain": p.gain}
        ent[r] = res.results
    return RanksProjection(
        rs.source,
        list(rs.ranks),
        on,
        sync_projection(model, factors),
        sync_projection(model, zero),
        amd,
        ent,
        list(rs.warnings) + warnings,
    )
