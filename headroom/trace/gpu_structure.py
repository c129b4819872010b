"""GPU activities against the structure they claim to sit in (headroom/trace/validate.py refuses them, or
with --lenient drops them with a counted warning):

* the device: where the trace lists its devices (`deviceProperties`), an activity on another device id is
  no activity of this run (a stray record would add a device, and its whole wall as idle);
* its launch: an activity starts after the runtime call that launched it (same `correlation`) began;
* its stream: a stream starts its work in launch order (Hopper's programmatic dependent launch lets a kernel
  start before its predecessor ends, never before it starts), so an activity that starts after work its
  stream launched later, or before work launched earlier, is out of place; of the two sets the smaller one
  is named (one kernel moved a second later, not the hundred it now appears to precede);
* the end of the trace: after the CPU's last event the GPU only drains what was launched, so no activity
  starts later than all the GPU work there is, run one after another.

On every trace in traces/ and HolisticTraceAnalysis' test traces no activity breaks these (the smallest
distance from a launch to its kernel there is 4 us; no stream is out of launch order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader
import numpy as np

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_loader.load("polars")

# Clock noise between the CPU's and the GPU's timestamps that is not taken as a contradiction.
LAUNCH_SLACK_US = 50.0
ORDER_SLACK_US = 1.0
# Per activity drained after the CPU's last event: the gap between two (launch latency) at most.
DRAIN_GAP_US = 10.0
DRAIN_MARGIN_US = 1000.0


def listed_devices(metadata: dict | None) -> list[int] | None:
    """The device ids the trace's `deviceProperties` lists, or None when it lists none."""
    props = metadata.get("deviceProperties") if isinstance(metadata, dict) else None
    if not isinstance(props, list):
        return None
    ids: list[int] = [
        i for i in (p.get("id") for p in props if isinstance(p, dict)) if isinstance(i, int) and not isinstance(i, bool)
    ]
    return ids or None


def _empty(gpu: pl.DataFrame) -> pl.DataFrame:
    return gpu.head(0).with_columns(field=pl.lit(None, dtype=pl.String), problem=pl.lit(None, dtype=pl.String))


def _flag(gpu: pl.DataFrame, bad: pl.Expr, field: str, words: pl.Expr | str) -> pl.DataFrame:
    w = pl.lit(words) if isinstance(words, str) else words
    return gpu.filter(bad.fill_null(False)).with_columns(field=pl.lit(field), problem=w.cast(pl.String))


def misplaced(
    gpu: pl.DataFrame, launches: pl.DataFrame, cpu_end: float | None, devices: list[int] | None
) -> pl.DataFrame:
    """The rows of `gpu` that their device, launch, stream or the trace's end contradict, with the field and
    the problem (the first of each row's problems)."""
    if not gpu.height:
        return _empty(gpu)
    found = []
    if devices is not None and "device" in gpu.columns:
        listed = ", ".join(map(str, devices))
        found.append(
            _flag(
                gpu,
                pl.col("device").is_not_null() & ~pl.col("device").is_in(devices),
                "device",
                f"not among the trace's devices (deviceProperties: {listed})",
            )
        )
    if cpu_end is not None:
        limit = cpu_end + float(gpu["dur"].sum()) + DRAIN_GAP_US * gpu.height + DRAIN_MARGIN_US
        found.append(
            _flag(
                gpu,
                pl.col("ts") > limit,
                "ts",
                f"after all the GPU work launched could have drained (the CPU's last event ends at {cpu_end:.17g} us)",
            )
        )
    same = launches.schema.get("correlation") == gpu.schema.get("correlation")
    if launches.height and same and gpu.schema.get("correlation") in (pl.Int64, pl.Int32, pl.UInt64, pl.UInt32):
        launched = _launched(gpu, launches)
        early = _before_launch(launched)
        # the stream's order among the activities that are not already out of place
        rest = launched.filter(~pl.col("index").is_in(early["index"].implode()))
        found += [early.drop("_launch"), _out_of_stream_order(rest).drop("_launch")]
    found = [f for f in found if f.height]
    if not found:
        return _empty(gpu)
    return pl.concat(found, how="diagonal_relaxed").unique("index", keep="first", maintain_order=True)


def _launched(gpu: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """`gpu` with `_launch`: the start of the runtime call that launched each activity (null: not in the trace)."""
    first = (
        launches.filter(pl.col("correlation").is_not_null() & (pl.col("correlation") >= 0))
        .group_by("correlation")
        .agg(pl.col("ts").min().alias("_launch"))
    )
    return gpu.join(first, on="correlation", how="left")


def _before_launch(gpu: pl.DataFrame) -> pl.DataFrame:
    bad = pl.col("ts") < pl.col("_launch") - LAUNCH_SLACK_US
    words = pl.format("before its launch began ({} us earlier)", (pl.col("_launch") - pl.col("ts")).round(3))
    return _flag(gpu, bad, "ts", words)


def _out_of_stream_order(gpu: pl.DataFrame) -> pl.DataFrame:
    keys = ["device", "stream"]
    g = gpu.filter(pl.col("_launch").is_not_null()).select("index", *keys, "_launch", "ts")
    if g.height < 2:
        return _empty(gpu)
    g = _order_bounds(g, keys)
    late = g.filter(pl.col("ts") > pl.col("later") + ORDER_SLACK_US)
    early = g.filter(pl.col("ts") < pl.col("earlier") - ORDER_SLACK_US)
    if not late.height and not early.height:
        return _empty(gpu)
    if late.height and (late.height <= early.height or not early.height):
        rows, words = (
            late,
            pl.format(
                "after an activity its stream launched later ({} us after it began)",
                (pl.col("ts") - pl.col("later")).round(3),
            ),
        )
    else:
        rows, words = (
            early,
            pl.format(
                "before an activity its stream launched earlier ({} us before it began)",
                (pl.col("earlier") - pl.col("ts")).round(3),
            ),
        )
    problems = rows.select("index", problem=words)
    return gpu.join(problems, on="index", how="inner").with_columns(field=pl.lit("ts"))


def _order_bounds(g: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """`g` with, per row, `later`: the first start of the activities its stream launched after its own launch,
    and `earlier`: the last start of those launched before it (null where none). Per launch, since a CUDA
    graph's kernels share one. In numpy, one stream at a time (polars' windows and join took 0.5 GB and 2 s
    on the 4 GB trace); with a null or NaN among the numbers, polars' own rules decide."""
    cols = [g[c] for c in (*keys, "_launch", "ts")]
    if any(c.null_count() for c in cols) or any(c.dtype.is_float() and c.is_nan().any() for c in cols):
        per = (
            g.group_by(*keys, "_launch")
            .agg(pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi"))
            .sort(*keys, "_launch")
            .with_columns(
                later=pl.col("lo").reverse().cum_min().reverse().shift(-1).over(keys),
                earlier=pl.col("hi").cum_max().shift(1).over(keys),
            )
        )
        return g.join(per.select(*keys, "_launch", "later", "earlier"), on=[*keys, "_launch"], how="left")
    device, stream, launch, ts = (c.to_numpy() for c in cols)
    order = np.lexsort((launch, stream, device))
    d, s, t, la = device[order], stream[order], ts[order], launch[order]
    new_launch = np.r_[True, (d[1:] != d[:-1]) | (s[1:] != s[:-1]) | (la[1:] != la[:-1])]
    starts = np.flatnonzero(new_launch)
    lo, hi = np.minimum.reduceat(t, starts), np.maximum.reduceat(t, starts)
    new_stream = np.r_[True, (d[starts][1:] != d[starts][:-1]) | (s[starts][1:] != s[starts][:-1])]
    later, earlier = np.full(len(starts), np.nan), np.full(len(starts), np.nan)
    bounds = np.r_[np.flatnonzero(new_stream), len(starts)]
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        later[a : b - 1] = np.minimum.accumulate(lo[a + 1 : b][::-1])[::-1]
        earlier[a + 1 : b] = np.maximum.accumulate(hi[a : b - 1])
    launch_of_row = np.empty(len(order), dtype=np.int64)
    launch_of_row[order] = np.cumsum(new_launch) - 1
    return g.with_columns(
        later=pl.Series(later[launch_of_row]).fill_nan(None), earlier=pl.Series(earlier[launch_of_row]).fill_nan(None)
    )
