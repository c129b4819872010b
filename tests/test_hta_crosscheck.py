"""Cross-check our loader and step attribution against HolisticTraceAnalysis on the same real trace.

HTA (installed --no-deps as a test dependency) keeps the trace's ProfilerSteps
except the last one and stores timestamps as whole microseconds (so each
kernel's duration can differ from ours by < 2 us). Per kernel name, the number
of GPU activities must be equal and the time within 2 us per activity.
"""

import logging
import shutil
import warnings

import pytest

from headroom.trace.analysis import analyze
from tests.conftest import hta_trace

hta = pytest.importorskip(
    "hta.trace_analysis", reason="HolisticTraceAnalysis is a test dependency (make test installs it)"
)


def test_per_kernel_counts_and_times_match_hta(tmp_path):
    src = hta_trace("nccl_parser_config")
    shutil.copy(src, tmp_path / "rank-0.json.gz")
    logging.disable(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            analysis = hta.TraceAnalysis(trace_dir=str(tmp_path))
        finally:
            logging.disable(logging.NOTSET)
    t = analysis.t.get_trace(0)
    sym = analysis.t.symbol_table.get_sym_table()
    t = t.assign(n=[sym[i] for i in t["name"]], c=[sym[i] for i in t["cat"]])
    theirs = t[t["c"].isin(["kernel", "gpu_memcpy", "gpu_memset"])].groupby("n")["dur"].agg(["sum", "count"])

    a = analyze(src)
    kept = sorted(int(i) for i in t["iteration"].unique() if i >= 0)
    assert kept == [4, 5] and a.steps["step"].tolist() == [4, 5, 6]
    ours = a.events[a.events["step"].isin(kept)].groupby("name")["dur"].agg(["sum", "count"])

    assert len(theirs) == len(ours) == 72
    joined = ours.join(theirs, rsuffix="_hta", how="outer")
    assert (joined["count"] == joined["count_hta"]).all()
    assert ((joined["sum"] - joined["sum_hta"]).abs() <= 2.0 * joined["count"]).all()
    assert int(joined["count"].sum()) == 2516
