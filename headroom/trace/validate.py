"""Refuse impossible traces: every GPU activity and ProfilerStep needs a finite, non-negative `dur`
and a finite `ts` inside the trace's span, or the loader names the event and stops (or, lenient,
drops it and says how many it dropped). Also impossible, with the same two outcomes:

* a GPU activity longer than twice the CPU side's span and a millisecond (a 5 s kernel in a 60 ms
  trace): the profiler records the GPU while the CPU runs, and the queue drains soon after;
* a GPU activity recorded twice (the same device, stream, name, start and duration): it would
  count its time twice. Kernels on one stream may otherwise overlap: Hopper's programmatic
  dependent launch starts a kernel before its predecessor ends (the shipped ResNet-50 trace has
  117 such pairs, up to 23 us), so overlap alone is not an error;
* ProfilerStep ranges that overlap (a step starting before the one before it ended): every GPU
  activity belongs to one step, so overlapping steps lose some of them. Lenient drops the later step.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import lazy_loader
import numpy as np

from headroom.errors import UserError
from headroom.trace import gpu_structure
from headroom.trace.ranges import PROFILER_STEP_PREFIX
from headroom.trace.schema import REQUIRED

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_loader.load("polars")  # imported on first use (a cached analysis needs none)

# GPU work may run before the first CPU event (launched before recording began) and after the
# last one (the queue draining), and a step may idle long past its last op: the span is widened
# by ten times its own length, at least an hour. What lies beyond (a `dur` of 1e15 us, a `ts`
# in another epoch) is no time a profiler recorded.
SLACK_FACTOR = 10.0
MIN_SLACK_US = 3600e6
LONGEST_MARGIN_US = 1000.0


class ImpossibleEvent(UserError):
    pass


def step_rows(cpu: pl.DataFrame) -> pl.Expr:
    return pl.col("kind").is_in(["user_annotation", "cpu_op"]) & pl.col("name").str.starts_with(PROFILER_STEP_PREFIX)


def cpu_span(tables: dict[str, pl.DataFrame], with_steps: bool = False) -> tuple[float, float] | None:
    """[first start, last end] of the CPU side (ranges and runtime calls, steps excluded unless
    `with_steps`), or None. Reduced in place: a filtered copy of the CPU table (its names) was the
    largest allocation of loading a 4 GB trace."""
    ends: list[tuple[float, float]] = []
    for table, steps_out in ((tables["cpu"], not with_steps), (tables["launches"], False)):
        if not table.height:
            continue
        kept = pl.col("ts").is_finite() & pl.col("dur").fill_null(0.0).is_finite()
        if steps_out:
            kept = kept & ~step_rows(table)
        lo, hi = table.select(
            pl.col("ts").filter(kept).min(),
            (pl.col("ts") + pl.col("dur").fill_null(0.0)).filter(kept).max().alias("end"),
        ).row(0)
        if lo is not None:
            ends.append((float(lo), float(hi)))
    if not ends:
        return None
    return min(lo for lo, _ in ends), max(hi for _, hi in ends)


def span(tables: dict[str, pl.DataFrame]) -> tuple[float, float]:
    """[first start, last end] of the CPU side (ranges and runtime calls, steps excluded); of the GPU starts without one."""
    cpu = cpu_span(tables)
    if cpu is not None:
        return cpu
    gpu = tables["gpu"].filter(pl.col("ts").is_finite())
    if gpu.height:
        lo, hi = gpu.select(pl.col("ts").min(), pl.col("ts").max().alias("end")).row(0)
        return float(lo), float(hi)
    return 0.0, 0.0


def _problems(
    frame: pl.DataFrame, lo: float, hi: float, longest: float | None = None, duplicates: bool = False
) -> pl.DataFrame:
    """Rows with an impossible ts/dur, with the field and the problem (the first problem of each row).
    `longest`: no activity may last longer (the CPU side's span); `duplicates`: a row equal to an
    earlier one in device, stream, name, ts and dur is a problem."""
    slack = max(SLACK_FACTOR * (hi - lo), MIN_SLACK_US)
    ts, dur = pl.col("ts"), pl.col("dur")
    checks = [
        check
        for c in REQUIRED
        for check in ((c, pl.col(c).is_null(), "missing"), (c, ~pl.col(c).is_finite(), "not a finite number"))
    ]
    checks += [
        ("dur", dur < 0, "negative"),
        ("ts", (ts < lo - slack) | (ts > hi + slack), f"outside the trace's span ({lo:.17g} to {hi:.17g} us)"),
        ("dur", ts + dur > hi + slack, f"past the end of the trace's span ({hi:.17g} us)"),
    ]
    if longest is not None:
        checks.append(
            (
                "dur",
                dur > longest,
                f"longer than the trace could have recorded (at most {longest:.6g} us: "
                f"twice its CPU side's span and 1 ms)",
            )
        )
    if duplicates and (again := _again(frame)) is not None:
        frame = frame.with_columns(_again=again)
        checks.append(
            (
                "ts",
                pl.col("_again"),
                "a second record of an earlier GPU activity (same device, stream, name, start and duration)",
            )
        )
    field = pl.lit(None, dtype=pl.String)
    problem = pl.lit(None, dtype=pl.String)
    for name, bad, words in reversed(checks):
        field = pl.when(bad.fill_null(False)).then(pl.lit(name)).otherwise(field)
        problem = pl.when(bad.fill_null(False)).then(pl.lit(words)).otherwise(problem)
    return (
        frame.with_columns(field=field, problem=problem)
        .filter(pl.col("problem").is_not_null())
        .drop("_again", strict=False)
    )


def _again(frame: pl.DataFrame) -> pl.Series | None:
    """Whether each row repeats an earlier one in device, stream, name, ts and dur (in event order, so the
    first of two equal records is the one kept); None: no row does. The numbers are compared first (a
    hash of four numbers, a few ms on 87,000 activities): only where two rows share them are the names
    (a hash of text, twenty times that) compared."""
    numbers = frame.select(pl.struct("device", "stream", "ts", "dur").is_first_distinct()).to_series()
    if numbers.all():
        return None
    return ~frame.select(pl.struct("device", "stream", "name", "ts", "dur").is_first_distinct()).to_series()


def describe(row: dict, source: str) -> str:
    value = row[row["field"]]
    shown = (
        "" if value is None else f" {value!r}" if not isinstance(value, float) or math.isfinite(value) else f" {value}"
    )
    return (
        f"{source}: event {row['index']} ({row['kind']} {row['name'][:60]!r}): "
        f"{row['field']}{shown} is {row['problem']}"
    )


def check(
    tables: dict[str, pl.DataFrame],
    source: str,
    lenient: bool,
    unreadable_gpu: list[tuple[int, str]],
    orders: dict[str, np.ndarray | None] | None = None,
    metadata: dict | None = None,
) -> tuple[dict[str, pl.DataFrame], list[str]]:
    """The tables without impossible GPU activities and steps (lenient), or the first one's error line.
    `orders`: each table's rows in the loader's order (load.loader_order; None: as they are), which decides
    which of a table's impossible events is named first. `metadata`: the trace's (its `deviceProperties`
    name the devices a GPU activity may run on)."""
    orders = orders or {}
    lo, hi = span(tables)
    cpu = cpu_span(tables, with_steps=True)
    gpu = tables["gpu"]
    if gpu.height > 1 and not bool((np.diff(gpu["index"].to_numpy()) > 0).all()):
        gpu = gpu.sort("index")
    # GPU work drains after the CPU's last event: twice the CPU's span and a millisecond is the most
    # an activity can last
    longest = 2.0 * (cpu[1] - cpu[0]) + LONGEST_MARGIN_US if cpu is not None else None
    gpu_bad = _problems(gpu, lo, hi, longest=longest, duplicates=True)
    # Without the names (a join there copied every column): they are added to the few rows it flags.
    placed = gpu.drop("name")
    if gpu_bad.height:
        placed = placed.filter(~pl.col("index").is_in(gpu_bad["index"].implode()))
    misplaced = gpu_structure.misplaced(
        placed, tables["launches"], cpu[1] if cpu is not None else None, gpu_structure.listed_devices(metadata)
    )
    if misplaced.height:
        names = gpu.filter(pl.col("index").is_in(misplaced["index"].implode())).select("index", "name")
        misplaced = misplaced.join(names, on="index", how="left", maintain_order="left")
    gpu_bad = pl.concat([gpu_bad, misplaced], how="diagonal_relaxed")
    steps = tables["cpu"].filter(step_rows(tables["cpu"]))
    step_bad = _problems(steps, lo, hi) if steps.height else steps.head(0)
    if steps.height:
        for stage in (_uncounted_steps, _overlapping_steps, _misnumbered_steps):
            step_bad = pl.concat(
                [step_bad, stage(steps.filter(~pl.col("index").is_in(step_bad["index"].implode())))],
                how="diagonal_relaxed",
            )
    lines = [
        (int(r["index"]), describe(r, source))
        for frame, table in ((gpu_bad, "gpu"), (step_bad, "cpu"))
        for r in _first(frame, tables[table], orders.get(table)).iter_rows(named=True)
    ]
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
    return out, [
        f"dropped {n} GPU activit{'y' if n == 1 else 'ies'}/steps with an impossible ts or dur "
        f"(first: {first.split(': ', 1)[1]})"
    ]


# A step's number: what the profiler counts (0, 1, ...); 2^53 is beyond any count and any exact float.
MAX_STEP_NUMBER = 2**53


def _problem_rows(steps: pl.DataFrame, problems: dict[int, tuple[str, str]]) -> pl.DataFrame:
    """The rows of `steps` whose `index` is a key of `problems`, with its (field, problem)."""
    if not problems:
        return steps.head(0).with_columns(field=pl.lit(None, dtype=pl.String), problem=pl.lit(None, dtype=pl.String))
    bad = steps.filter(pl.col("index").is_in(list(problems)))
    field = {i: f for i, (f, _) in problems.items()}
    words = {i: w for i, (_, w) in problems.items()}
    return bad.with_columns(
        field=pl.col("index").replace_strict(field, return_dtype=pl.String),
        problem=pl.col("index").replace_strict(words, return_dtype=pl.String),
    )


def step_number(name: str) -> int | None:
    """N of `ProfilerStep#N`: a whole number from 0 to 2^53, else None."""
    digits = name[len(PROFILER_STEP_PREFIX) :]
    if not digits.isascii() or not digits.isdigit() or len(digits) > 16:
        return None
    n = int(digits)
    return n if n <= MAX_STEP_NUMBER else None


def _uncounted_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """ProfilerSteps with a number that is no count (`ProfilerStep#x`; beyond 2^53 it would wrap) or a
    duration of 0 (a step spans the work it launches), with the field and the problem."""
    problems: dict[int, tuple[str, str]] = {}
    for index, name, dur in steps.select("index", "name", "dur").iter_rows():
        if step_number(str(name)) is None:
            problems[index] = ("name", "no step number (a whole number from 0 to 2^53)")
        elif dur == 0:
            problems[index] = ("dur", "zero: a step spans the work it launches")
    return _problem_rows(steps, problems)


def _misnumbered_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """ProfilerSteps that the steps before them contradict, with the field and the problem: a number
    already used by a step that ended before this one began (a step recorded on several threads is one
    step: its copies overlap), or a number not above that of a step that began before it (the profiler
    counts up). The later of the two is the one named (and dropped)."""
    problems: dict[int, tuple[str, str]] = {}
    spans: dict[str, float] = {}  # per name: the end of its first copy
    top: tuple[int, str] | None = None  # the highest number so far, and its step
    for index, name, ts, dur in steps.select("index", "name", "ts", "dur").sort("ts", "index").iter_rows():
        n = step_number(str(name))
        if n is None:
            continue
        if name in spans:
            if ts >= spans[name]:
                problems[index] = (
                    "name",
                    f"used by an earlier step that ended {ts - spans[name]:.6g} us before "
                    f"this one began: two steps with one number",
                )
            continue  # else: the same step on another thread
        if top is not None and n <= top[0]:
            problems[index] = ("name", f"not above {top[1]}, which began before it: steps count up")
            continue
        spans[name] = ts + dur
        top = (n, str(name))
    return _problem_rows(steps, problems)


def _overlapping_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """Rows of the ProfilerSteps that start before an earlier step (another number) ended, with the
    field and the problem. A step recorded on several threads is one step: its longest range."""
    one = (
        steps.sort(["name", "dur"], descending=[False, True])
        .unique("name", keep="first", maintain_order=True)
        .sort("ts")
    )
    if one.height < 2:
        return steps.head(0).with_columns(field=pl.lit(None, dtype=pl.String), problem=pl.lit(None, dtype=pl.String))
    names, starts, ends = one["name"].to_list(), one["ts"].to_numpy(), (one["ts"] + one["dur"]).to_numpy()
    problems: dict[str, str] = {}
    kept = 0  # the step the next must start after (the later of two overlapping steps is the one dropped)
    for i in range(1, len(names)):
        if starts[i] < ends[kept]:
            problems[names[i]] = (
                f"inside an earlier step ({names[kept]} ends {ends[kept] - starts[i]:.6g} us "
                f"later): steps may not overlap"
            )
        else:
            kept = i
    bad = steps.filter(pl.col("name").is_in(list(problems)))
    return bad.with_columns(field=pl.lit("ts"), problem=pl.col("name").replace_strict(problems, return_dtype=pl.String))


def _first(bad: pl.DataFrame, table: pl.DataFrame, order: np.ndarray | None) -> pl.DataFrame:
    """The row of `bad` (rows of `table`, both in event order) that comes first in `order`."""
    if bad.height < 2 or order is None:
        return bad.head(1)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    rows = np.searchsorted(table["index"].to_numpy(), bad["index"].to_numpy())
    return bad[int(np.argmin(rank[rows])) :][:1]
