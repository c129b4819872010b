"""The replay event by event: the CPU clocks a replay moves, the blocking calls that move them, and the sweep
that replays a timeline with replaced calls in the CPU's program order (without replaced calls a replay is solved
a stream chain at a time instead: :mod:`headroom.projection.chains`, equal up to rounding).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from operator import itemgetter

import numpy as np

from headroom.projection.cpu import CallChange
from headroom.projection.replay_plan import _Plan

# A host synchronisation returns this long after the GPU work it waited for ends (the runtime's wake-up
# and, for `tensor.item()`, a small device-to-host copy): the order of a launch latency.
SYNC_RETURN_US = 5.0


class _Clock:
    """One process's CPU clock in the replay: a piecewise-linear map from measured to replayed time.

    Before the anchor (the first step's CPU start) time is unchanged; after it the clock runs at
    `scale` (the profiler-overhead correction, 1.0 = as measured). Breakpoints come in time order:
    replaced CPU footprints (a segment of another length) and blocking calls (where the CPU waited for
    the GPU, the replayed return time).
    """

    __slots__ = ("t", "n", "s")

    def __init__(self, anchor: float, scale: float) -> None:
        self.t, self.n, self.s = [anchor], [anchor], [scale]

    def at(self, x: float) -> float:
        t = self.t
        if x < t[0]:
            return x
        k = bisect.bisect_right(t, x) - 1
        return self.n[k] + self.s[k] * (x - t[k])

    def add(self, x: float, new: float, slope: float) -> None:
        if x < self.t[-1]:  # concurrent threads of one process: keep the map monotone in measured time
            x = self.t[-1]
        if x == self.t[-1]:
            self.n[-1], self.s[-1] = new, slope
        else:
            self.t.append(x)
            self.n.append(new)
            self.s.append(slope)


def _sync(
    plan: _Plan, i: int, clocks: list, ends_of: Callable[[np.ndarray], np.ndarray], max_late: float, cpu_scale: float
) -> float:
    """Blocking call i returns when what it waited for has ended on the replayed GPU: its process's clock
    moves there. `ends_of(events)`: their replayed ends so far (NaN: not replayed yet). Returns how far
    the call's return moved."""
    pid, t0, t1, hi, synthetic = plan.sync_rows[i]  # hi: events by measured end, those ending after t1 excluded
    clk = clocks[pid]
    new_t0 = clk.at(t0)
    dl = new_t0 - t0
    if synthetic:  # waits for everything launched before it (replayed already: the sweep is in program order)
        cand = plan.by_end[plan.launch[plan.by_end] <= t0]
        g = -math.inf
        if len(cand):
            e2 = ends_of(cand)
            done = e2 == e2
            if done.any():
                g = float(e2[done].max())
        new_end = max(new_t0, g + SYNC_RETURN_US * synthetic)
        clk.add(t1, new_end, cpu_scale)
        return abs(new_end - t1)
    lo = bisect.bisect_left(plan.end_sorted_list, t0 + min(dl, 0.0) - max_late)
    g_meas = g_new = -math.inf
    if hi > lo:
        cand = plan.by_end[lo:hi]
        cand = cand[(plan.launch[cand] <= t0) | (plan.corr[cand] == plan.s_corr[i])]
        if len(cand):
            e2 = ends_of(cand)
            done = e2 == e2  # replayed already (not NaN)
            if done.any():
                g_new = float(e2[done].max())
                g_meas = float(plan.end[cand[done]].max())
    wait = max(0.0, g_meas - t0)
    nowait = (t1 - t0) - wait
    new_end = cpu_scale * nowait + max(new_t0, g_new)
    clk.add(t1, new_end, cpu_scale)
    return abs(new_end - t1)


class _Footprints:
    """The replaced calls' CPU footprints in the sweep: where each starts on its process's replayed clock, how
    long it lasts after the change (the new launches' cost, all in its first piece), and when the new kernels of
    its call are launched (`group_launch`, NaN until the footprint starts: the lower bound keeps the CPU)."""

    def __init__(self, plan: _Plan, changes: Sequence[CallChange], clocks: list, cpu_scale: float) -> None:
        self.plan, self.changes, self.clocks, self.cpu_scale = plan, changes, clocks, cpu_scale
        self.group_launch: list[list[float]] = [[math.nan] * len(ch.groups) for ch in changes]
        self.new_start = [0.0] * len(plan.pieces)
        self.new_len = [0.0] * len(plan.pieces)

    def start(self, i: int) -> None:
        _, c, j = self.plan.pieces[i]
        ch = self.changes[c]
        o = self.plan.origin
        a, z = ch.call.pieces[j]
        a, z = a - o, z - o
        clk = self.clocks[self.plan.ch_pid[c]]
        new_a = clk.at(a)
        new_len = self.cpu_scale * ch.added_us if j == 0 else 0.0
        if j == 0:
            self.group_launch[c] = [new_a + self.cpu_scale * t for t in ch.launch_at]
        self.new_start[i], self.new_len[i] = new_a, new_len
        clk.add(a, new_a, new_len / (z - a) if z > a else self.cpu_scale)

    def end(self, i: int) -> float:
        """Moves the clock at the footprint's end; returns how far the end moved."""
        _, c, j = self.plan.pieces[i]
        z = self.changes[c].call.pieces[j][1] - self.plan.origin
        new_z = self.new_start[i] + self.new_len[i]
        self.clocks[self.plan.ch_pid[c]].add(z, new_z, self.cpu_scale)
        return abs(new_z - z)


def _sweep(
    plan: _Plan, new_dur: np.ndarray, changes: Sequence[CallChange], clocks: list, cpu_scale: float
) -> tuple[np.ndarray, float]:
    """The replay event by event in the sweep's order (replaced calls move CPU clocks as it goes)."""
    n = len(new_dur)
    sweep_idx, sweep_kind, L = plan.lists()
    # local names: the loop below reads them for every event
    L_launch, L_lat, L_prev, L_g, L_dep, L_d, L_end = (L[k] for k in ("launch", "lat", "prev", "g", "dep", "d", "end"))
    L_has, L_pid, L_ts, L_call, L_group, L_removed = (
        L[k] for k in ("has_launch", "pids", "ts", "call_of", "group_of", "removed")
    )
    L_dur = new_dur.tolist()
    ch_pid = plan.ch_pid
    fp = _Footprints(plan, changes, clocks, cpu_scale)
    group_launch = fp.group_launch
    max_late = 0.0
    max_shift = 0.0
    bisect_right = bisect.bisect_right
    end2_l = [math.nan] * n

    def ends_of(cand: np.ndarray) -> np.ndarray:
        # The candidates' replayed ends so far, gathered in C (a sync can have 10^4 of them).
        return np.array(itemgetter(*cand.tolist())(end2_l) if len(cand) > 1 else [end2_l[int(cand[0])]], dtype=float)

    for i, k in zip(sweep_idx, sweep_kind):
        if k == 3:
            c = L_call[i]
            if c < 0:  # the common case, inlined: its launch on its clock
                if L_has[i]:
                    clk = clocks[L_pid[i]]
                    x = L_launch[i]
                    t = clk.t
                    if x < t[0]:
                        start = x + L_lat[i]
                    else:
                        j = bisect_right(t, x) - 1 if len(t) > 1 else 0
                        start = clk.n[j] + clk.s[j] * (x - t[j]) + L_lat[i]
                else:
                    start = L_ts[i]
            elif L_removed[i]:  # the call launches nothing now: its work runs inside its stream predecessor
                p = L_prev[i]
                start = end2_l[p] if p >= 0 and end2_l[p] == end2_l[p] else (L_launch[i] if L_has[i] else L_ts[i])
                end2_l[i] = start + L_dur[i]
                continue
            else:
                gl = group_launch[c][L_group[i]]
                if gl != gl:  # CPU unchanged (the lower bound): at the group's last launch
                    ch = changes[c]
                    last_i = int(ch.groups[L_group[i]][-1])
                    gl = clocks[ch_pid[c]].at(L_launch[last_i])
                    group_launch[c][L_group[i]] = gl
                start = gl + L_lat[i]
            p = L_prev[i]
            if p >= 0:
                v = end2_l[p] + L_g[i]
                if v > start:
                    start = v
            q = L_dep[i]
            if q >= 0:
                v = end2_l[q] + L_d[i]
                if v > start:  # NaN (producer not replayed yet) compares False
                    start = v
            e2 = start + L_dur[i]
            end2_l[i] = e2
            if e2 - L_end[i] > max_late:
                max_late = e2 - L_end[i]
        elif k == 0:  # a replaced footprint starts
            fp.start(i)
        elif k == 1:  # ... and ends
            max_shift = max(max_shift, fp.end(i))
        else:
            max_shift = max(max_shift, _sync(plan, i, clocks, ends_of, max_late, cpu_scale))
    return np.array(end2_l, dtype=float), max_shift
