"""Refuse impossible traces: every GPU activity and ProfilerStep needs a finite, non-negative `dur`
and a finite `ts` inside the trace's span, or the loader names the event and stops (or, lenient,
drops it and says how many it dropped)."""

from __future__ import annotations

import math

import lazy_loader
import numpy as np

from headroom.errors import UserError
from headroom.trace.ranges import PROFILER_STEP_PREFIX

pl = lazy_loader.load("polars")   # imported on first use (a cached analysis needs none)

# GPU work may run before the first CPU event (launched before recording began) and after the
# last one (the queue draining), and a step may idle long past its last op: the span is widened
# by ten times its own length, at least an hour. What lies beyond (a `dur` of 1e15 us, a `ts`
# in another epoch) is no time a profiler recorded.
SLACK_FACTOR = 10.0
MIN_SLACK_US = 3600e6


class ImpossibleEvent(UserError):
    pass


def step_rows(cpu: pl.DataFrame) -> pl.Expr:
    return pl.col("kind").is_in(["user_annotation", "cpu_op"]) & pl.col("name").str.starts_with(PROFILER_STEP_PREFIX)


def span(tables: dict[str, pl.DataFrame]) -> tuple[float, float]:
    """[first start, last end] of the CPU side (ranges and runtime calls, steps excluded); of the GPU starts without one."""
    cpu = tables["cpu"].filter(~step_rows(tables["cpu"]))
    sides = [t.select("ts", "dur") for t in (cpu, tables["launches"]) if t.height]
    if sides:
        frame = pl.concat(sides).filter(pl.col("ts").is_finite() & pl.col("dur").fill_null(0.0).is_finite())
        if frame.height:
            lo, hi = frame.select(pl.col("ts").min(), (pl.col("ts") + pl.col("dur").fill_null(0.0)).max().alias("end")).row(0)
            return float(lo), float(hi)
    gpu = tables["gpu"].filter(pl.col("ts").is_finite())
    if gpu.height:
        lo, hi = gpu.select(pl.col("ts").min(), pl.col("ts").max().alias("end")).row(0)
        return float(lo), float(hi)
    return 0.0, 0.0


def _problems(frame: pl.DataFrame, lo: float, hi: float) -> pl.DataFrame:
    """Rows with an impossible ts/dur, with the field and the problem (the first problem of each row)."""
    slack = max(SLACK_FACTOR * (hi - lo), MIN_SLACK_US)
    ts, dur = pl.col("ts"), pl.col("dur")
    checks = [
        ("ts", ts.is_null(), "missing"),
        ("ts", ~ts.is_finite(), "not a finite number"),
        ("dur", dur.is_null(), "missing"),
        ("dur", ~dur.is_finite(), "not a finite number"),
        ("dur", dur < 0, "negative"),
        ("ts", (ts < lo - slack) | (ts > hi + slack), f"outside the trace's span ({lo:.17g} to {hi:.17g} us)"),
        ("dur", ts + dur > hi + slack, f"past the end of the trace's span ({hi:.17g} us)"),
    ]
    field = pl.lit(None, dtype=pl.String)
    problem = pl.lit(None, dtype=pl.String)
    for name, bad, words in reversed(checks):
        field = pl.when(bad.fill_null(False)).then(pl.lit(name)).otherwise(field)
        problem = pl.when(bad.fill_null(False)).then(pl.lit(words)).otherwise(problem)
    return (frame.with_columns(field=field, problem=problem).filter(pl.col("problem").is_not_null()))


def describe(row: dict, source: str) -> str:
    value = row[row["field"]]
    shown = "" if value is None else f" {value!r}" if not isinstance(value, float) or math.isfinite(value) \
        else f" {value}"
    return (f"{source}: event {row['index']} ({row['kind']} {row['name'][:60]!r}): "
            f"{row['field']}{shown} is {row['problem']}")


def check(tables: dict[str, pl.DataFrame], source: str, lenient: bool, unreadable_gpu: list[tuple[int, str]],
          orders: dict[str, np.ndarray | None] | None = None) -> tuple[dict[str, pl.DataFrame], list[str]]:
    """The tables without impossible GPU activities and steps (lenient), or the first one's error line.
    `orders`: each table's rows in the loader's order (load.loader_order; None: as they are), which decides
    which of a table's impossible events is named first."""
    orders = orders or {}
    lo, hi = span(tables)
    gpu_bad = _problems(tables["gpu"], lo, hi)
    steps = tables["cpu"].filter(step_rows(tables["cpu"]))
    step_bad = _problems(steps, lo, hi) if steps.height else steps.head(0)
    lines = [(int(r["index"]), describe(r, source))
             for frame, table in ((gpu_bad, "gpu"), (step_bad, "cpu"))
             for r in _first(frame, tables[table], orders.get(table)).iter_rows(named=True)]
    lines += [(i, f"{source}: event {i}: {problem}") for i, problem in unreadable_gpu[:1]]
    if not lines:
        return tables, []
    first = min(lines)[1]
    if not lenient:
        raise ImpossibleEvent(f"{first} (--lenient drops such events)")
    n = gpu_bad.height + step_bad.height + len(unreadable_gpu)
    out = dict(tables)
    out["gpu"] = tables["gpu"].filter(~pl.col("index").is_in(gpu_bad["index"].implode()))
    out["cpu"] = tables["cpu"].filter(~pl.col("index").is_in(step_bad["index"].implode()))
    return out, [f"dropped {n} GPU activit{'y' if n == 1 else 'ies'}/steps with an impossible ts or dur "
                 f"(first: {first.split(': ', 1)[1]})"]


def _first(bad: pl.DataFrame, table: pl.DataFrame, order: np.ndarray | None) -> pl.DataFrame:
    """The row of `bad` (rows of `table`, both in event order) that comes first in `order`."""
    if bad.height < 2 or order is None:
        return bad.head(1)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    rows = np.searchsorted(table["index"].to_numpy(), bad["index"].to_numpy())
    return bad[int(np.argmin(rank[rows])):][:1]
