"""One task per trace file: read, attribute and classify it where the task runs, then the command's own
per-trace work (`product`: a projection, a targets table, a report row). What comes back is small:

* the Analysis without its loaded trace tables (`slim`): the per-event frame, the summaries, the
  metadata and the trace's clock base, which is what a directory of ranks is reduced from
  (`headroom.trace.rank_set.rank_set`, the projection through the collectives);
* the product, or the UserError it raised (raised again where the one-process path would raise it);
* the UserError that refused the trace, if one did.

The reduction is the one-process path's (`headroom.cli.common.Reader`), so the output is the same bytes
(`tests/test_fleet.py`). A task asks Ray for `MEMORY_BASE + parallel.needed_memory(file)` bytes (the loader's
own estimate for one trace: `MEMORY_PER_TEXT_BYTE` of its JSON text), loads one trace with the loader's
worker process off (one core per task), and keeps nothing after it returns.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.trace.read_options import ReadOptions

MEMORY_BASE = 512 * 2**20  # a task's interpreter, pandas and polars, before the trace


@dataclass(frozen=True)
class TraceTask:
    path: str
    options: ReadOptions  # how the command reads its traces (user files by path: each task compiles them itself)
    product: Callable[[Any], Any] | None = None  # module-level function of one Analysis
    skip_ranks: bool = True  # no product for a trace that says it is a rank of a run (computed if needed)
    cwd: str = ""  # paths are read, and named, as the command was given them


@dataclass
class TraceResult:
    path: str
    analysis: Any = None
    error: UserError | None = None
    product: Any = None
    product_error: UserError | None = None
    has_product: bool = False
    extra: dict = field(default_factory=dict)

    def get(self) -> Any:
        if self.product_error is not None:
            raise self.product_error
        return self.product


def task_memory(path: str) -> int:
    from headroom.trace.parallel import needed_memory

    try:
        return MEMORY_BASE + needed_memory(Path(path))
    except (OSError, UserError):  # named by the task itself
        return MEMORY_BASE


def run_task(task: TraceTask) -> TraceResult:
    """Read and analyse one trace, then its product (in a Ray worker, or in this process)."""
    from headroom.trace.analysis import analyze
    from headroom.trace.classify import load_classifier
    from headroom.trace.load import iter_traces
    from headroom.trace.rank_set import rank_id

    o = task.options
    if task.cwd and os.getcwd() != task.cwd:
        os.chdir(task.cwd)
    os.environ.setdefault("HEADROOM_LOAD_WORKERS", "0")  # a task is one core: no second process
    out = TraceResult(task.path)
    try:
        rules, policy = load_classifier(o.rules, o.policy)
        traces = iter_traces([Path(task.path)], lenient=o.lenient, use_cache=o.use_cache)
        try:
            trace = next(traces)
        finally:
            traces.close()
        a = analyze(trace, rules=rules, policy=policy, whole_trace=o.whole_trace, window=o.window)
    except UserError as e:
        out.error = e
        return out
    rid = rank_id(a)
    if task.product is not None and not (task.skip_ranks and rid is not None and (rid.world_size or 2) > 1):
        try:
            out.product = task.product(a)
        except UserError as e:
            out.product_error = e
        out.has_product = True
    out.analysis = slim(a)
    return out


def slim(a: Any) -> Any:
    """The Analysis without the loaded trace's tables (each kept empty, with its columns)."""
    t = a.trace
    if t is None:
        return a
    empty = {f.name: getattr(t, f.name).iloc[:0] for f in dataclasses.fields(t) if hasattr(getattr(t, f.name), "iloc")}
    return dataclasses.replace(a, trace=dataclasses.replace(t, **empty))
