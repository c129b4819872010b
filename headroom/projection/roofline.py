"""The roofline of each `targets` row: how close its kernels run to the device's peaks, and how fast
they could be.

For the op calls behind a row's kernels (each kernel's op, by its launch's External id), the recorded input
shapes and dtypes (read on demand: headroom/trace/op_inputs.py) give FLOPs and bytes per call
(headroom/projection/costs.py, data/costs.toml). Against the device's peaks (data/devices.toml) each call
has a floor, `max(FLOPs / compute peak, bytes / memory bandwidth, shortest kernel)`, and a limit (the term
that wins: compute, memory or latency). Per row: its costed op calls, FLOPs and bytes read and written over
the window, the achieved TFLOP/s and TB/s of its costed kernels and their fractions of the peaks
(`peak_tflops`: the rate its FLOPs run at when each call runs at its own dtype's peak), the limit holding most of
its floor time, `floor_us` (the costed calls' floors plus
the time of kernels without a cost, left as it is) and `max_speedup = us / floor_us`.

A module row also gets the fused floor: each forward call's inputs (its recorded shapes) and output (the
last op's output) moved once, its FLOPs at peak; the backward kernels keep their per-op floors; never above
the unfused floor. The fused bound counts no parameters (a Linear's weight): for modules holding GEMMs it
is optimistic.

`achievable_gain`: the Amdahl gain of the row at `min(max_speedup, factor)`, the factor `targets` ranks by;
`rank_by="achievable"` ranks the rows by it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from headroom.datafiles import shipped
from headroom.errors import UserError, unknown_name
from headroom.projection.costs import Cost, Device, devices, itemsize, op_cost
from headroom.projection.targets import MODULE_KINDS, NO_OP, Targets, rank_targets
from headroom.regex import compile_user_regex
from headroom.trace.analysis import Analysis
from headroom.trace.intervals import ranges_on_threads
from headroom.trace.modules import STACK_SEP
from headroom.trace.op_inputs import OpCall, Tensor, op_calls

ROOFLINE_COLUMNS = [
    "op_calls",
    "flops",
    "bytes_read",
    "bytes_written",
    "bytes",
    "costed",
    "achieved_tflops",
    "achieved_tb_s",
    "peak_tflops",
    "compute_fraction",
    "memory_fraction",
    "limit",
    "floor_us",
    "max_speedup",
    "fused_bytes",
    "fused_floor_us",
    "fused_max_speedup",
    "achievable_gain",
]
RANKINGS = ("gain", "achievable")
_INPUT = re.compile(r"([A-Za-z0-9_]+)\[([0-9,]*)\]")
_RUN_DTYPES = {"bfloat16": "bf16", "float16": "f16", "half": "f16", "float32": "f32", "float": "f32"}


def device_for(name: str, key: str | None = None) -> Device:
    """The device table's entry `key` (`--peaks`), else the first whose `match` finds the trace's `name`."""
    table = devices()
    if key is not None:
        if key.lower() not in table:
            raise unknown_name("device", key, table, "--peaks")
        return table[key.lower()]
    raw = shipped("devices.toml")["devices"]
    for k, d in table.items():
        if compile_user_regex(raw[k]["match"], f"devices.toml {k}.match").search(name or ""):
            return d
    raise UserError(
        f"no peaks known for the device {name!r} (data/devices.toml has "
        f"{', '.join(d.name for d in table.values())}): name one with --peaks"
    )


def trace_device(a: Analysis, key: str | None = None) -> Device:
    """The peaks for `a`: the entry `key` (`--peaks`), else its device's. A GPU trace that names no device
    (no `deviceProperties` name) is refused rather than matched as the CPU (the empty name is the CPU's)."""
    if key is None and a.mode == "gpu" and not a.device_name.strip():
        raise UserError(
            f"{a.source}: a GPU trace that names no device (no deviceProperties name): give its "
            f"peaks with --peaks ({', '.join(devices())})"
        )
    return device_for(a.device_name if a.mode == "gpu" else "cpu", key)


# --- the op calls -------------------------------------------------------------------------


def _run_dtype(a: Analysis) -> str:
    return _RUN_DTYPES.get(str(a.manifest.get("dtype") or "").lower(), "")


def _tf32(a: Analysis) -> bool:
    """Whether f32 matrix ops may run on TF32 tensor cores: as the manifest records (`tf32`, or its
    `matmul` key), else yes (a floor is a lower bound: the fastest the hardware does f32 GEMMs)."""
    v = a.manifest.get("tf32")
    v = v.get("matmul") if isinstance(v, dict) else v
    return v is not False


def _with_dtype(call: OpCall, dtype: str) -> OpCall:
    """Tensor lists whose dtype Kineto did not record (a `cat` of TensorList only) take the run's dtype."""
    if not dtype or not any(t.dtype == "" for lst in call.lists for t in lst):
        return call
    lists = tuple(tuple(Tensor(t.dtype or dtype, t.shape, t.strides) for t in lst) for lst in call.lists)
    return dataclasses.replace(call, lists=lists)


@dataclass(frozen=True)
class _Floor:
    compute_us: float
    memory_us: float
    floor_us: float
    limit: str


def _floor(cost: Cost, dev: Device, tf32: bool) -> _Floor:
    compute = cost.flops / (dev.compute_tflops(cost, tf32) * 1e6) if cost.flops else 0.0
    memory = cost.bytes / (dev.memory_tb_s * 1e6) if cost.bytes else 0.0
    terms = {"compute": compute, "memory": memory, "latency": dev.min_kernel_us}
    limit = max(terms, key=lambda k: (terms[k], k != "latency"))
    return _Floor(compute, memory, terms[limit], limit)


@dataclass
class _Calls:
    """The costed op calls of a trace's events: per External id its Cost and floor."""

    ext: np.ndarray  # per event: its op call's External id (-1: none)
    costs: dict[int, Cost]
    floors: dict[int, _Floor]


def _calls(a: Analysis, dev: Device) -> _Calls:
    ev = a.events
    ext = (
        pd.to_numeric(ev["external_id"], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
        if "external_id" in ev.columns
        else np.full(len(ev), -1, dtype=np.int64)
    )
    ids = np.unique(ext[ext >= 0])
    calls = op_calls(Path(a.source), ids.tolist()) if len(ids) else {}
    dtype, tf32 = _run_dtype(a), _tf32(a)
    costs = {}
    for i, call in calls.items():
        c = op_cost(_with_dtype(call, dtype))
        if c is not None:
            costs[i] = c
    return _Calls(ext, costs, {i: _floor(c, dev, tf32) for i, c in costs.items()})


# --- per row ----------------------------------------------------------------------------------


def _col(ev: pd.DataFrame, name: str) -> np.ndarray:
    if name not in ev.columns:
        return np.full(len(ev), "", dtype=object)
    return ev[name].astype(object).where(ev[name].notna(), "").astype(str).to_numpy(dtype=object)


def row_mask(ev: pd.DataFrame, kind: str, name: str, scope: str = "self") -> np.ndarray:
    """The events of a `targets` row (kind op|top_op|kernel|module|module_path, scope self|total)."""
    if kind in ("op", "top_op"):
        v = _col(ev, kind)
        return v == ("" if name == NO_OP else name)
    if kind == "kernel":
        return _col(ev, "name") == name
    if kind == "module":
        if scope == "total":
            return np.array([name in s.split(STACK_SEP) for s in _col(ev, "module_stack")], dtype=bool)
        return _col(ev, "module_type") == name
    path = _col(ev, "module")
    if scope == "total":
        return (path == name) | np.array([p.startswith(name + ".") for p in path], dtype=bool)
    return path == name


def _inputs_bytes(text: str, default: int) -> float:
    return float(
        sum(
            math.prod(int(n) for n in dims.split(",") if n) * itemsize(dt, default)
            for dt, dims in _INPUT.findall(text or "")
        )
    )


def _fused_us(
    a: Analysis, ev: pd.DataFrame, mask: np.ndarray, kind: str, name: str, calls: _Calls, dev: Device, tf32: bool
) -> tuple[float, float] | None:
    """(fused bytes, fused floor µs) of a module row over the window (forward calls fused, the rest per op)."""
    mods = a.modules
    if mods is None or not len(mods):
        return None
    mods = mods[(mods["module_type" if kind == "module" else "path"].astype(str) == name).to_numpy()]
    if not len(mods):
        return None
    mods = mods.reset_index(drop=True)
    sel = np.flatnonzero(mask)
    phase = _col(ev, "phase")[sel]
    fwd = sel[phase != "backward"]
    launch_ts = ev["launch_ts"].to_numpy(dtype=float)[fwd]
    where = ranges_on_threads(mods, ev["launch_pid"].iloc[fwd], ev["launch_tid"].iloc[fwd], launch_ts)
    default = 2 if _run_dtype(a) in ("bf16", "f16") else 4
    fused_bytes = fused_floor = 0.0
    seen: set[int] = set()
    for call in range(len(mods)):
        in_call = fwd[where == call]
        ids = [int(i) for i in dict.fromkeys(calls.ext[in_call].tolist()) if i in calls.costs]
        if not len(in_call):
            continue
        last = ids[-1] if ids else None
        moved = _inputs_bytes(str(mods["inputs"].iat[call]), default) + (calls.costs[last].written if last else 0.0)
        compute = sum(calls.floors[i].compute_us for i in ids)
        fused_bytes += moved
        fused_floor += max(moved / (dev.memory_tb_s * 1e6), compute, dev.min_kernel_us)
        seen.update(ids)
    dur = ev["dur"].to_numpy(dtype=float)
    placed = np.isin(sel, fwd[where >= 0])
    for i in sel[~placed]:  # backward kernels, and forward ones outside every recorded call: per op
        e = int(calls.ext[i])
        if e in calls.floors:
            if e not in seen:
                fused_floor += calls.floors[e].floor_us
                seen.add(e)
        else:
            fused_floor += dur[i]
    return fused_bytes, fused_floor


def roofline(
    a: Analysis, table: pd.DataFrame, device: Device | None = None, scope: str = "self", speedup: float | None = None
) -> tuple[pd.DataFrame, Device, list[str]]:
    """`table` (a `targets` table of `a`) with the ROOFLINE_COLUMNS added, the device used and notes. Like
    `us`, `flops`, `bytes`, `floor_us`, `fused_bytes` and `fused_floor_us` cover the analysed window."""
    dev = device or trace_device(a)
    out = table.copy()
    for c in ROOFLINE_COLUMNS:
        out[c] = "" if c == "limit" else np.nan
    if not dev.peaks:
        return out, dev, [f"{dev.name}: no peaks known, so no roofline (data/devices.toml)"]
    if not isinstance(a, Analysis):
        raise UserError("--roofline reads one trace (not a directory of ranks)")
    ev = a.events
    calls = _calls(a, dev)
    tf32 = _tf32(a)
    dur = ev["dur"].to_numpy(dtype=float)
    for r in range(len(out)):
        kind, name = str(out["kind"].iat[r]), str(out["name"].iat[r])
        row_scope = str(out["scope"].iat[r]) if "scope" in out.columns and kind in MODULE_KINDS else scope
        mask = row_mask(ev, kind, name, row_scope)
        ids = calls.ext[mask]
        costed = np.isin(ids, np.fromiter(calls.costs, dtype=np.int64, count=len(calls.costs)))
        us, us_costed = float(dur[mask].sum()), float(dur[mask][costed].sum())
        unique = [int(i) for i in np.unique(ids[costed])]
        flops = sum(calls.costs[i].flops for i in unique)
        read = sum(calls.costs[i].read for i in unique)
        written = sum(calls.costs[i].written for i in unique)
        moved = read + written
        at_peak = sum(calls.floors[i].compute_us for i in unique)
        by_limit: dict[str, float] = {}
        for i in unique:
            f = calls.floors[i]
            by_limit[f.limit] = by_limit.get(f.limit, 0.0) + f.floor_us
        floor = sum(by_limit.values()) + (us - us_costed)
        out.at[out.index[r], "op_calls"] = len(unique)
        out.at[out.index[r], "flops"] = flops
        out.at[out.index[r], "bytes_read"] = read
        out.at[out.index[r], "bytes_written"] = written
        out.at[out.index[r], "bytes"] = moved
        out.at[out.index[r], "costed"] = us_costed / us if us > 0 else 0.0
        if us_costed > 0:
            out.at[out.index[r], "achieved_tflops"] = flops / us_costed / 1e6
            out.at[out.index[r], "achieved_tb_s"] = moved / us_costed / 1e6
            out.at[out.index[r], "memory_fraction"] = moved / us_costed / 1e6 / dev.memory_tb_s
            if at_peak > 0:  # the rate all its FLOPs could run at: each call's at its own peak
                out.at[out.index[r], "peak_tflops"] = flops / at_peak / 1e6
                out.at[out.index[r], "compute_fraction"] = at_peak / us_costed
        out.at[out.index[r], "limit"] = max(by_limit, key=lambda k: by_limit[k]) if by_limit else ""
        out.at[out.index[r], "floor_us"] = floor
        out.at[out.index[r], "max_speedup"] = us / floor if floor > 0 else np.nan
        # The fused floor moves the module's inputs and output once: for its kernels and those of the
        # modules inside it (scope total, or a module with no kernels in modules inside it).
        whole = row_scope == "total" or (kind in MODULE_KINDS and (row_mask(ev, kind, name, "total") == mask).all())
        if kind in MODULE_KINDS and whole:
            fused = _fused_us(a, ev, mask, kind, name, calls, dev, tf32)
            if fused is not None:
                out.at[out.index[r], "fused_bytes"] = fused[0]
                # Never above the unfused floor: a module input its kernels never read (a tensor passed for
                # its dtype) need not be read by a fused kernel either.
                fused_floor = min(fused[1], floor)
                out.at[out.index[r], "fused_floor_us"] = fused_floor
                out.at[out.index[r], "fused_max_speedup"] = us / fused_floor if fused_floor > 0 else np.nan
    if speedup is not None:
        best = out["fused_max_speedup"].where(out["fused_max_speedup"].notna(), out["max_speedup"])
        s = np.minimum(best.to_numpy(dtype=float), speedup)
        out["achievable_gain"] = np.where(
            np.isfinite(s) & (s > 0), out["gain_inf"].to_numpy(dtype=float) * (1 - 1 / s), np.nan
        )
    return out, dev, []


def ranked(table: pd.DataFrame, rank_by: str, top: int | None) -> pd.DataFrame:
    """Each grouping's rows by `gain` (as `targets` ranks them) or `achievable` gain, the first `top`."""
    if rank_by not in RANKINGS:
        raise unknown_name("ranking", rank_by, RANKINGS, "--rank-by")
    frames = []
    for kind in dict.fromkeys(table["kind"]):
        t = table[table["kind"] == kind]
        if rank_by == "achievable":
            t = t.sort_values(["achievable_gain", "us"], ascending=False, kind="stable", na_position="last")
        frames.append(t.head(top) if top else t)
    return pd.concat(frames, ignore_index=True) if frames else table


def roofline_targets(
    a: Analysis,
    speedup: float,
    by: Sequence[str] = ("op", "module"),
    top: int | None = 20,
    replay_top: int = 0,
    scope: str = "self",
    peaks: str | None = None,
    rank_by: str = "gain",
) -> Targets:
    """`targets` with the roofline columns, ranked by `gain` or by `achievable` gain (`targets --roofline`)."""
    if rank_by not in RANKINGS:
        raise unknown_name("ranking", rank_by, RANKINGS, "--rank-by")
    dev = trace_device(a, peaks)
    base = rank_targets(a, speedup, by, top if rank_by == "gain" else None, replay_top, scope)
    table, dev, notes = roofline(a, base.table, dev, scope, speedup)
    return dataclasses.replace(base, table=ranked(table, rank_by, top), notes=base.notes + tuple(notes), device=dev)
