"""Cross-check the communication split and per-rank breakdown against HolisticTraceAnalysis.

What HTA computes and we compare, per rank, on the same steps (HTA keeps every ProfilerStep but the
last): ``get_comm_comp_overlap`` (communication time while compute ran, over communication time) and
``get_temporal_breakdown`` (compute time, busy time = kernel_time - idle_time, non-compute time).

Where HTA breaks, and the workaround:

* HTA rounds nanosecond timestamps to microseconds by default (start up, end down): on the A100
  trace that moves the overlap from 14.76% to 14.31%. ``HTA_DISABLE_NS_ROUNDING=1`` keeps them.
* HTA analyses GPU activity only: on a CPU-only (gloo) trace its overlap is NaN and its temporal
  breakdown raises IndexError. We hand HTA each rank's CPU op exclusive intervals as GPU activities
  (communication ones named like NCCL kernels), so the interval arithmetic is checked on the real
  gloo timing; what is headroom's alone there is cutting ops into exclusive intervals.
* With pandas 3, HTA fails to parse a trace whose correlation ids fit in int16 but whose events
  number more than 32767 (it copies the ids' dtype for event indices); Kineto's ids are larger, and
  so are the ones we write.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import math
import shutil
import warnings

import numpy as np
import pytest

from headroom.trace.analysis import analyze, analyze_path
from headroom.trace.comm import activity_segments, comm_split
from headroom.trace.rank_set import rank_set
from tests.conftest import hta_trace
from tests.ranks_synthetic import write_pair

hta = pytest.importorskip(
    "hta.trace_analysis", reason="HolisticTraceAnalysis is a test dependency (make test installs it)"
)


@contextlib.contextmanager
def quiet():
    """HTA logs and warns a lot (pandas 3 deprecations among them)."""
    logging.disable(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def run_hta(trace_dir):
    with quiet():
        a = hta.TraceAnalysis(trace_dir=str(trace_dir))
        overlap = a.get_comm_comp_overlap(visualize=False).set_index("rank")["comp_comm_overlap_pctg"]
        breakdown = a.get_temporal_breakdown(visualize=False).set_index("rank")
    return a, overlap, breakdown


def kept_steps(a):
    """HTA keeps every ProfilerStep but the last (all of a one-step trace)."""
    steps = sorted(a.steps["step"].tolist())
    return steps[:-1] if len(steps) > 1 else steps


def ours_on(a, segments):
    s = comm_split(a, segments)
    busy = float(np.sum(np.diff(_union(segments), axis=1))) if len(segments) else 0.0
    return s, busy


def _union(seg):
    from headroom.trace.comm import merged

    s, e = merged(seg["ts"].to_numpy(dtype=float), seg["end"].to_numpy(dtype=float))
    return np.stack([s, e], axis=1)


def test_overlap_and_breakdown_match_hta_on_the_a100_nccl_trace(tmp_path, monkeypatch):
    src = hta_trace("nccl_parser_config")  # rank 0 of 2, NCCL all-reduce on its own stream
    shutil.copy(src, tmp_path / "rank-0.json.gz")
    a = analyze(src)
    kept = kept_steps(a)
    seg = activity_segments(a)
    seg = seg[a.events["step"].to_numpy()[seg["event"].to_numpy()] <= kept[-1]]
    ours, busy = ours_on(a, seg)

    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    _, overlap, bd = run_hta(tmp_path)
    assert kept == [4, 5]
    assert round(100 * ours.overlap_fraction, 2) == overlap[0] == 14.76
    # Timestamps here are epoch microseconds (4.5e12): float64 holds them to 1 ns, and HTA subtracts
    # the earliest first, so sums over 2,500 intervals agree to 1e-6, not exactly.
    assert ours.compute_busy_us == pytest.approx(bd.loc[0, "compute_time(us)"], rel=1e-6)
    assert busy == pytest.approx(bd.loc[0, "kernel_time(us)"] - bd.loc[0, "idle_time(us)"], rel=1e-6)
    assert busy - ours.compute_busy_us == pytest.approx(bd.loc[0, "non_compute_time(us)"], rel=1e-5)
    assert ours.exposed_us == pytest.approx(ours.comm_busy_us * (1 - overlap[0] / 100), rel=1e-3)

    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "0")  # HTA's default: rounded timestamps
    _, rounded, _ = run_hta(tmp_path)
    assert rounded[0] == 14.31


def as_gpu_activities(a, rank: int, world: int, path) -> int:
    """A rank's CPU op exclusive intervals written as a Kineto trace of GPU activities HTA can read
    (one stream per CPU thread; each interval launched from inside its ProfilerStep)."""
    seg = activity_segments(a)
    streams = {s: i + 1 for i, s in enumerate(sorted(set(a.events["stream"].astype(str))))}
    stream_of = a.events["stream"].astype(str).map(streams).to_numpy()
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{int(s.step)}",
            "pid": 1,
            "tid": 1,
            "ts": float(s.ts),
            "dur": float(s.dur),
        }
        for s in a.trace.steps.itertuples(index=False)
    ]
    # Correlation ids from 1,000,000 as Kineto's are: HTA stores event indices in a column it copied from
    # the correlation's dtype, which small ids downcast to int16; pandas 3 then refuses indices > 32767.
    for i, (t0, t1, e, comm) in enumerate(zip(seg["ts"], seg["end"], seg["event"], seg["comm"]), 1_000_000):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": float(t0),
                "dur": 0.0,
                "args": {"correlation": i},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ncclKernel_cpu" if comm else "compute",
                "pid": 0,
                "tid": int(stream_of[e]),
                "ts": float(t0),
                "dur": float(t1 - t0),
                "args": {"device": 0, "stream": int(stream_of[e]), "correlation": i},
            }
        )
    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world},
        "traceEvents": events,
    }
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return len(seg)


def test_hta_reads_our_rank_files_as_we_do(gloo_bert_ddp, tmp_path):
    """HTA finds the rank in the file (the first "rank": it meets, our manifest's) and gives up on CPU time."""
    d = gloo_bert_ddp.out_dir
    with quiet():
        a = hta.TraceAnalysis(trace_dir=str(d))
        overlap = a.get_comm_comp_overlap(visualize=False).set_index("rank")["comp_comm_overlap_pctg"]
        with pytest.raises(IndexError):  # no GPU kernels: HTA cannot say
            a.get_temporal_breakdown(visualize=False)
    assert {r: p.rsplit("/", 1)[-1] for r, p in a.t.trace_files.items()} == {0: "rank-0.json.gz", 1: "rank-1.json.gz"}
    assert all(math.isnan(v) for v in overlap)


def test_overlap_and_breakdown_match_hta_on_the_gloo_ranks(gloo_bert_ddp, tmp_path, monkeypatch):
    rs = gloo_bert_ddp.ranks
    ours = {}
    for r, a in zip(rs.ranks, rs.analyses):
        as_gpu_activities(a, r, len(rs.ranks), tmp_path / f"rank-{r}.json.gz")
        kept = kept_steps(a)
        seg = activity_segments(a)
        t0 = seg["ts"].to_numpy()
        steps = a.trace.steps[a.trace.steps["step"].isin(kept)]
        inside = np.zeros(len(seg), dtype=bool)
        for s in steps.itertuples(index=False):
            inside |= (t0 >= s.ts) & (t0 <= s.ts + s.dur)
        ours[r] = ours_on(a, seg[inside])
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    _, overlap, bd = run_hta(tmp_path)
    assert sorted(overlap.index) == rs.ranks
    for r, (s, busy) in ours.items():
        assert s.comm_busy_us > 0 and 0 <= s.exposed_us <= s.comm_busy_us
        assert round(100 * s.overlap_fraction, 2) == pytest.approx(overlap[r], abs=0.011), r
        assert s.compute_busy_us == pytest.approx(bd.loc[r, "compute_time(us)"], rel=1e-6), r
        assert busy == pytest.approx(bd.loc[r, "kernel_time(us)"] - bd.loc[r, "idle_time(us)"], rel=1e-6), r


def test_hta_finds_the_same_straggler(tmp_path):
    """HTA's straggler detector (the rank whose last big NCCL kernel starts latest) on the two-rank
    traces with a known answer: rank 1, as ours. HTA needs NCCL 2.17-style names (``ncclKernel*``:
    newer ``ncclDevKernel_*`` kernels are not seen), more than two steps (two: an empty argmax), and
    one clock for all ranks (it aligns them by the earliest event of any; ours by the collectives)."""
    d = write_pair(tmp_path / "four", steps=4, shift=0.0)
    with quiet():
        stragglers = hta.TraceAnalysis(trace_dir=str(d)).get_potential_stragglers(num_candidates=1)
    assert list(stragglers) == [1] == [rank_set(analyze_path(d)).slowest_rank]
