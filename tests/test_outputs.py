"""Files headroom writes: whole or not at all, with the umask's mode, under a lock where
several runs share them; a run replaces a trace only once it finished; the profiler's noise kept out
of the live display; overhead that cannot be told from noise is not printed as a number."""

from __future__ import annotations

import errno
import gzip
import json
import multiprocessing
import os
from pathlib import Path

import pytest

from headroom.errors import UserError
from headroom.profile.manifest import MANIFEST_NAME, update_manifest
from headroom.stepstats import StepStats
from tests.conftest import SHIPPED_TRACES

DLRM = SHIPPED_TRACES / "dlrm.train.json.gz"


def test_annotate_output_gets_the_umask_mode(tmp_path):
    from headroom.report.annotate import annotate_trace

    old = os.umask(0o022)
    try:
        out = tmp_path / "a.json.gz"
        assert annotate_trace(DLRM, out) == 537
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o644  # mkstemp's 0600 used to leak through
    assert json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]


def test_a_full_disk_leaves_the_old_figure_whole(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from headroom.report import figure_files

    fig = Figure()
    fig.subplots().plot([0, 1], [0, 1])
    (old,) = figure_files.save(fig, tmp_path / "fig", ("pdf",))
    before = old.read_bytes()

    def full_disk(self, fh, *a, **k):
        fh.write(b"%PDF-1.4 half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    with pytest.raises(UserError, match=r"fig\.pdf: cannot write \(No space left on device\)"):
        figure_files.save(fig, tmp_path / "fig", ("pdf",))
    assert old.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["fig.pdf"]


def _write_entries(args) -> None:
    out_dir, worker, n = args
    for i in range(n):
        update_manifest(Path(out_dir), f"w{worker}-{i}.json.gz", {"worker": worker, "i": i})


def test_concurrent_runs_keep_every_manifest_entry(tmp_path):
    # Without the lock, 25-30 of 80 entries survived four writers.
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_write_entries, [(str(tmp_path), w, 20) for w in range(4)])
    doc = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert len(doc["traces"]) == 80
    assert {(e["worker"], e["i"]) for e in doc["traces"].values()} == {(w, i) for w in range(4) for i in range(20)}


def test_a_failed_run_does_not_replace_the_trace_of_the_same_name(tmp_path, monkeypatch):
    from test_workload import write_workload_file

    import headroom.profile.run as run
    from headroom.profile.workload import Options

    f = write_workload_file(tmp_path, "user-mlp-keep")
    out = tmp_path / "out"
    fast = dict(device="cpu", steps=1, warmup=0, timed_steps=1, workload_file=f)
    first = run.profile_workload("user-mlp-keep", Options(), out=out, **fast)
    good = first.trace_path.read_bytes()
    assert first.analysis.source == str(first.trace_path)

    def unreadable(path, *a, **k):  # e.g. a trace headroom cannot read back (NaN in its manifest)
        raise UserError(f"{path}: invalid JSON")

    monkeypatch.setattr(run, "analyze", unreadable)
    with pytest.raises(UserError):
        run.profile_workload("user-mlp-keep", Options(), out=out, **fast)
    assert first.trace_path.read_bytes() == good
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [first.trace_path.name, MANIFEST_NAME, MANIFEST_NAME + ".lock"]
    )


def test_timed_steps_0_is_refused_by_the_api(tmp_path):
    from headroom.profile.run import profile_workload

    with pytest.raises(UserError, match="--timed-steps must be at least 1"):
        profile_workload("resnet-50", device="cpu", out=tmp_path, timed_steps=0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "timed,profiled,measurable,text",
    [
        ([100.0] * 3, [161.0], False, "not measurable (3 timed and 1 profiled step(s); needs 3 of each)"),
        (
            [100.0, 101.0, 99.0],
            [38.0, 38.5, 37.5],
            False,
            "not measurable (profiled steps 62% faster than unprofiled: noise)",
        ),
        ([100.0, 110.0, 90.0], [103.0, 104.0, 102.0], True, "within the noise (+3.0%, steps vary by 10.0%)"),
        ([100.0, 101.0, 99.0], [120.0, 121.0, 119.0], True, "+20.0%"),
    ],
)
def test_profiler_overhead_is_a_number_only_when_it_can_be_told_from_noise(timed, profiled, measurable, text):
    # A CPU run with few steps printed "profiler overhead -62%".
    from headroom.profile.run import overhead_verdict

    assert overhead_verdict(StepStats(timed, "wall-clock"), StepStats(profiled, "wall-clock")) == (measurable, text)


def test_library_noise_stays_out_of_the_live_display(capfd):
    import io

    from rich.console import Console

    from headroom.cli.profile import RichProgress

    progress = RichProgress()
    shown = io.StringIO()
    progress.console = Console(file=shown, width=200)
    with progress.capturing():
        with progress.stage("profiling"):
            os.write(2, b"USDT:2026-12-01 09:33:59 4537:4537 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
            os.write(1, b"a message from a library\n")
            os.write(2, b"and a warning on stderr\n")
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # nothing reached the terminal underneath the display
    lines = shown.getvalue().splitlines()
    assert lines[:2] == ["a message from a library", "and a warning on stderr"]
    assert "profiling" in lines[2] and not any("USDT" in ln for ln in lines)


def test_analyze_a_directory_of_ranks(tmp_path, builder):
    import headroom

    for rank in range(2):
        b = type(builder)(pid=100 + rank)
        b.step(1, 0, 100)
        b.kernel("sm90_xmma_gemm", launch_ts=1, ts=2, dur=10 * (rank + 1), device=rank)
        b.write(tmp_path / f"rank-{rank}.json")
    ranks = headroom.analyze_all(tmp_path)  # one Analysis per rank (analyze: one trace, a directory refused)
    assert [a.total_us for a in ranks] == [10, 20] and [Path(a.source).name for a in ranks] == [
        "rank-0.json",
        "rank-1.json",
    ]
    assert headroom.analyze(tmp_path / "rank-1.json").total_us == 20
    with pytest.raises(UserError, match="is a directory"):
        headroom.analyze(tmp_path)
