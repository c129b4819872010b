"""The `Trace` tables, built from the decoded polars columns (pandas DataFrames with numeric columns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import lazy_loader
import numpy as np
import pandas as pd

from headroom.trace.codes import factorized
from headroom.trace.ranges import FRAME_PREFIX, PROFILER_STEP_PREFIX

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_loader.load("polars")  # imported on first use (a cached analysis needs none)


@dataclass
class Trace:
    """One profiler trace (one rank), as typed tables.

    gpu:      name, kind (kernel|memcpy|memset), device, stream, ts, dur,
              correlation, bytes, index (position in traceEvents)
    cpu:      name, cat (cpu_op|user_annotation|python_function), pid, tid,
              ts, dur, external_id, sequence and fwd_thread (autograd's
              "Sequence number"/"Fwd thread id", -1 where absent), inputs
              (recorded shapes of headroom's module ranges, "" elsewhere)
    launches: name, cat (cuda_runtime|cuda_driver), pid, tid, ts, dur,
              correlation, external_id
    gpu_annotations: name, device, stream, ts, dur (gpu_user_annotation ranges)
    syncs:    name ("Stream Wait Event", "Event Sync", ...), device, stream, ts, dur,
              correlation, wait_on_stream, wait_on_cuda_event_record_corr_id (-1 where
              absent): Kineto's cuda_sync records, in traces profiled with
              ``enable_cuda_sync_events``; empty otherwise
    flows:    forward -> backward links (Kineto `fwdbwd` flows), one row per linked pair:
              id, start_pid, start_tid, start_ts, end_pid, end_tid, end_ts (the ends sit on the
              forward and the backward op's start). Launch -> kernel flows (`ac2g`) are used by
              the loader to fill a missing `correlation` and not kept.
    warnings: what the loader skipped or dropped (unreadable events, --lenient drops), one line each
    """

    source: str
    gpu: pd.DataFrame
    cpu: pd.DataFrame
    launches: pd.DataFrame
    gpu_annotations: pd.DataFrame
    syncs: pd.DataFrame
    base_ns: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    flows: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=FLOW_PAIR_COLUMNS))
    warnings: list[str] = field(default_factory=list)
    cache_key: Any = field(default=None, repr=False, compare=False)  # where its cache entry is (trace.cache)

    @property
    def has_gpu(self) -> bool:
        return len(self.gpu) > 0

    def cpu_names_start_with(self, *prefixes: str) -> np.ndarray:
        """Boolean mask over `cpu`: names starting with any of `prefixes`. The cpu table's names are
        factorized once per table (several attribution steps ask), not once per question."""
        memo = self.__dict__.get("_cpu_name_codes")
        if memo is None or memo[0] is not self.cpu:  # (a table replaced: factorize it anew)
            codes, uniques = factorized(np.asarray(self.cpu["name"], dtype=object), use_na_sentinel=False)
            memo = (self.cpu, codes, uniques)
            self.__dict__["_cpu_name_codes"] = memo
        _, codes, uniques = memo
        hit = np.fromiter(
            (isinstance(u, str) and u.startswith(prefixes) for u in uniques), dtype=bool, count=len(uniques)
        )
        return hit[codes]

    def cpu_ops(self) -> pd.DataFrame:
        """The cpu table's ops (cat cpu_op), without headroom's own frame ranges (``headroom/...``: C++
        RecordFunctions too, but frames, not work), indexed 0..n-1. Kept: attribution asks twice."""
        memo = self.__dict__.get("_cpu_ops")
        if memo is None or memo[0] is not self.cpu:
            cpu = self.cpu
            ops = cpu[(cpu["cat"] == "cpu_op").to_numpy() & ~self.cpu_names_start_with(FRAME_PREFIX)]
            memo = (cpu, ops.reset_index(drop=True))
            self.__dict__["_cpu_ops"] = memo
        return memo[1]

    @cached_property
    def steps(self) -> pd.DataFrame:
        """ProfilerStep#N ranges recorded on the CPU: step, ts, dur, end."""
        c = self.cpu
        annotation = (c["cat"] == "user_annotation").to_numpy()
        step = self.cpu_names_start_with(PROFILER_STEP_PREFIX)
        # Modern traces record steps as user_annotation; very old ones as cpu_op.
        m = step & annotation if (step & annotation).any() else step & (annotation | (c["cat"] == "cpu_op").to_numpy())
        s = c.loc[m, ["name", "ts", "dur"]].copy()
        s["name"] = s["name"].astype(str)
        s["step"] = pd.to_numeric(s["name"].str.slice(len(PROFILER_STEP_PREFIX)), errors="coerce")
        s = s.dropna(subset=["step"]).astype({"step": "int64"})
        # A step can appear on several threads' views; keep one range per step.
        s = s.sort_values(["step", "dur"], ascending=[True, False]).drop_duplicates("step")
        s["end"] = s["ts"] + s["dur"]
        return s[["step", "ts", "dur", "end"]].reset_index(drop=True)


# The tables of a Trace (what the cache stores).
TRACE_TABLES = ("gpu", "cpu", "launches", "gpu_annotations", "syncs", "flows")
FLOW_PAIR_COLUMNS: list[str] = ["id", "start_pid", "start_tid", "start_ts", "end_pid", "end_tid", "end_ts"]


# --- from polars columns to the pandas tables --------------------------------


def texts_at(values: pd.Series, rows: np.ndarray) -> np.ndarray:
    """The text of `values` at row positions `rows` (an object array): only those rows are converted."""
    return values.iloc[rows].astype(str).to_numpy(dtype=object)


# Every helper below takes `o`: the table's rows in loader order (load.loader_order; None: as they are),
# applied to the numpy arrays made from the polars columns.


def _take(values: np.ndarray, o) -> np.ndarray:
    return values if o is None else values[o]


def _ids(column: pl.Series, o=None) -> np.ndarray:
    """int64 ids (-1 where absent); ids beyond 64 bits keep an object column of Python ints."""
    if column.dtype == pl.Int128:
        values = column.fill_null(-1).to_list()
        fits = all(-(2**63) <= v < 2**63 for v in values)
        return _take(np.array(values, dtype=np.int64 if fits else object), o)
    return _take(column.fill_null(-1).cast(pl.Int64).to_numpy(), o)


def _codes(column: pl.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes and distinct values of a string column in its own (event) order (names repeat: one Python
    str per value, not per row), the values in order of first appearance."""
    column = column.fill_null("")
    values = column.unique(maintain_order=True).to_list()
    return column.cast(pl.Enum(values)).to_physical().cast(pl.Int64).to_numpy(), values


def _distinct(column: pl.Series, o=None) -> tuple[np.ndarray, list[str]]:
    """`_codes` in loader order, the values in order of first appearance there."""
    codes, values = _codes(column)
    if o is None:
        return codes, values
    codes, firsts = pd.factorize(codes[o])
    return codes.astype(np.int64), [values[i] for i in firsts.tolist()]


def _named_codes(column: pl.Series, o=None) -> tuple[np.ndarray, np.ndarray]:
    """Codes and distinct values (an object array) of a string column, in loader order; the values' own order
    is not first appearance when `o` is given (the callers only look values up)."""
    codes, values = _codes(column)
    return _take(codes, o), np.asarray(values, dtype=object)


def _names(column: pl.Series, o=None) -> np.ndarray:
    codes, values = _named_codes(column, o)
    return values[codes]


def _categories(column: pl.Series, o=None) -> pd.Categorical:
    codes, values = _distinct(column, o)
    return pd.Categorical.from_codes(codes, categories=values)


def _thread_keys(column: pl.Series, o=None) -> pd.Categorical:
    """pid/tid as strings, stored as categories (numeric ones in numeric order)."""
    if column.dtype.is_integer() and column.null_count() == 0:
        # All numbers: each one's place among the few distinct ones (sorted) is its code, the codes of the
        # numerically ordered categories (a binary search per row, not a sort of the column).
        distinct = column.unique().sort()
        codes = (
            np.searchsorted(distinct.to_numpy(), column.to_numpy()).astype(np.int64)
            if len(column)
            else np.empty(0, np.int64)
        )
        return pd.Categorical.from_codes(_take(codes, o), categories=[str(v) for v in distinct.to_list()])
    column = column.cast(pl.String)
    codes, values = _codes(column)
    order = sorted(range(len(values)), key=lambda i: _numbers_first(values[i]))
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = np.arange(len(values))
    return pd.Categorical.from_codes(
        _take(rank[codes] if len(values) else codes, o), categories=[values[i] for i in order]
    )


def _numbers_first(text: str) -> tuple:
    return (0, int(text), text) if text.lstrip("-").isdigit() else (1, 0, text)


def _small_ints(column: pl.Series, fallback: pl.Series, o=None) -> np.ndarray:
    """device/stream numbers: the args value, else the row's pid/tid when numeric, else -1."""
    return _take(column.fill_null(fallback.cast(pl.Int64, strict=False)).fill_null(-1).to_numpy(), o)


def _cpu_side_columns(t: pl.DataFrame, o=None, names: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """name/cat/pid/tid/ts/dur columns of a CPU-side table (launches, CPU ranges); `names`: the name
    column's codes (in loader order) and distinct values, when the caller has them already."""
    codes, values = names if names is not None else _named_codes(t["name"], o)
    return {
        "name": values[codes],
        "cat": _categories(t["kind"], o),
        "pid": _thread_keys(t["pid"], o),
        "tid": _thread_keys(t["tid"], o),
        "ts": _take(t["ts"].to_numpy(), o),
        "dur": _take(t["dur"].fill_null(0.0).to_numpy(), o),
    }


def _device_side_columns(t: pl.DataFrame, o=None) -> dict[str, Any]:
    """name/device/stream/ts/dur columns of a table of events on a device (GPU activities, GPU ranges, syncs)."""
    return {
        "name": _names(t["name"], o),
        "device": _small_ints(t["device"], t["pid"], o),
        "stream": _small_ints(t["stream"], t["tid"], o),
        "ts": _take(t["ts"].to_numpy(), o),
        "dur": _take(t["dur"].fill_null(0.0).to_numpy(), o),
    }


def _link_flows(table: pl.DataFrame, flows: pl.DataFrame, phases: list[str]) -> pl.DataFrame:
    """Fill a missing correlation from the flow event at the same thread and time (its id is the correlation)."""
    if table["correlation"].null_count() == 0:
        return table
    if table.schema["pid"] != flows.schema["pid"] or table.schema["tid"] != flows.schema["tid"]:
        table = table.with_columns(pl.col("pid", "tid").cast(pl.String))
        flows = flows.with_columns(pl.col("pid", "tid").cast(pl.String))
    ends = (
        flows.filter((pl.col("kind") == "ac2g") & pl.col("ph").is_in(phases) & pl.col("id").is_not_null())
        .select("pid", "tid", "ts", flow_id="id")
        .unique(subset=["pid", "tid", "ts"], keep="last")
    )
    return (
        table.join(ends, on=["pid", "tid", "ts"], how="left", maintain_order="left")
        .with_columns(correlation=pl.coalesce("correlation", "flow_id"))
        .drop("flow_id")
    )


def _flow_pairs(flows: pl.DataFrame) -> pd.DataFrame:
    """fwdbwd flows as linked (start, finish) pairs; a start without its finish (or the reverse) links nothing."""
    f = flows.filter(pl.col("kind") == "fwdbwd").with_columns(pl.col("pid", "tid").cast(pl.String))
    ends = {
        ph: f.filter(pl.col("ph") == ph)
        .unique(subset=["id"], keep="first", maintain_order=True)
        .select(
            "id",
            pl.col("pid").alias(f"{side}_pid"),
            pl.col("tid").alias(f"{side}_tid"),
            pl.col("ts").alias(f"{side}_ts"),
        )
        for ph, side in (("s", "start"), ("f", "end"))
    }
    pairs = ends["s"].join(ends["f"], on="id", how="inner", maintain_order="left")
    return pd.DataFrame(
        {
            c: _ids(pairs[c])
            if pairs[c].dtype.is_integer()
            else pairs[c].to_numpy()
            if pairs[c].dtype.is_numeric()
            else np.asarray(pairs[c].to_list(), dtype=object)
            for c in FLOW_PAIR_COLUMNS
        }
    )  # (ids beyond 64 bits: Python ints, as _ids gives them)


def _frame(columns: dict[str, Any]) -> pd.DataFrame:
    """A pandas frame that holds these arrays as they are (each made here for it): pandas would otherwise copy
    every column into one 2-D block per dtype (a copy of every table). Arrays polars lent (read-only
    views of its memory) are copied, so the frame owns what it holds."""
    return pd.DataFrame(
        {c: v.copy() if isinstance(v, np.ndarray) and not v.flags.writeable else v for c, v in columns.items()},
        copy=False,
    )


def tabulate(
    source: str,
    tables: dict[str, pl.DataFrame],
    base_ns: int | None,
    meta: dict[str, Any],
    warnings: list[str] | None = None,
    orders: dict[str, Any] | None = None,
) -> Trace:
    """The pandas tables the analyses use; `orders`: each table's rows in loader order (load.loader_order)."""
    orders = orders or {}
    # Each polars table is let go once its pandas table is made (the 4 GB trace's peak was here).
    flows = tables.pop("flows")
    flow_pairs = _flow_pairs(flows)
    g = _link_flows(tables.pop("gpu"), flows, ["f", "t"])  # (a left join: the rows stay as they were)
    o = orders.get("gpu")
    device_side = _device_side_columns(g, o)
    gpu = _frame(
        {
            "name": device_side.pop("name"),
            "kind": _categories(g["kind"], o),
            **device_side,
            "correlation": _ids(g["correlation"], o),
            "external_id": _ids(g["external_id"], o),
            "bytes": _take(g["bytes"].to_numpy(), o),
            "index": _take(g["index"].cast(pl.Int64).to_numpy(), o),
        }
    )
    del g, device_side
    c = _link_flows(tables.pop("launches"), flows, ["s"])
    del flows
    o = orders.get("launches")
    launches = _frame(
        {**_cpu_side_columns(c, o), "correlation": _ids(c["correlation"], o), "external_id": _ids(c["external_id"], o)}
    )
    del c
    c = tables.pop("cpu")
    o = orders.get("cpu")
    names = _named_codes(c["name"], o)  # kept for Trace.cpu_names_start_with
    cpu = _frame(
        {
            **_cpu_side_columns(c, o, names),
            "external_id": _ids(c["external_id"], o),
            "sequence": _ids(c["sequence"], o),
            "fwd_thread": _ids(c["fwd_thread"], o),
            "inputs": _names(c["inputs"], o),
        }
    )
    del c
    gpu_annotations = _frame(_device_side_columns(tables.pop("gpu_annotations"), orders.get("gpu_annotations")))
    s = tables.pop("syncs")
    o = orders.get("syncs")
    syncs = _frame(
        {
            **_device_side_columns(s, o),
            "correlation": _ids(s["correlation"], o),
            "wait_on_stream": _take(s["wait_on_stream"].fill_null(-1).to_numpy(), o),
            "wait_on_cuda_event_record_corr_id": _ids(s["wait_on_cuda_event_record_corr_id"], o),
        }
    )
    trace = Trace(
        source=source,
        gpu=gpu,
        cpu=cpu,
        launches=launches,
        gpu_annotations=gpu_annotations,
        syncs=syncs,
        base_ns=base_ns,
        metadata=meta,
        flows=flow_pairs,
        warnings=list(warnings or []),
    )
    trace.__dict__["_cpu_name_codes"] = (cpu, *names)  # the names' codes, known here already
    return trace
