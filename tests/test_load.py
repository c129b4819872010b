"""The loader: impossible traces refused, the streamed split, the worker, the cache, and both decode
paths identical on generated traces (hypothesis)."""

import gzip
import json
import math
import os
import re
import shutil
import threading
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headroom.trace.document as document
import headroom.trace.kineto as kineto
import headroom.trace.load as load
import headroom.trace.scan as scan
from headroom.trace import cache, chunks, parallel
from headroom.trace.analysis import analyze
from headroom.trace.load import TraceError, load_trace
from tests.conftest import SHIPPED_TRACES, hta_trace
from tests.fingerprint import fingerprint_tables

TABLES = load.TRACE_TABLES


def _assert_same(a, b):
    for t in TABLES:
        pd.testing.assert_frame_equal(getattr(a, t), getattr(b, t), check_categorical=True, obj=t)
    assert a.warnings == b.warnings and a.base_ns == b.base_ns and a.metadata == b.metadata


def _trace(tmp_path, events, name="t.json", **top):
    p = tmp_path / name
    p.write_text(json.dumps({**top, "traceEvents": events}, indent=1))
    return p


def _kernel(**over):
    e = {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": 0,
        "tid": 7,
        "ts": 10.0,
        "dur": 5.0,
        "args": {"correlation": 1, "device": 0, "stream": 7},
    }
    e.update(over)
    return e


STEP = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 100.0}
LAUNCH = {
    "ph": "X",
    "cat": "cuda_runtime",
    "name": "cudaLaunchKernel",
    "pid": 1,
    "tid": 1,
    "ts": 5.0,
    "dur": 2.0,
    "args": {"correlation": 1},
}


# --- impossible traces: one line naming the file, the event and the field -----------------


@pytest.mark.parametrize(
    "over,field,problem",
    [
        ({"dur": -1e6}, "dur", "dur -1000000.0 is negative"),
        ({"dur": "abc"}, "dur", "dur nan is not a finite number"),
        ({"dur": "nan"}, "dur", "dur nan is not a finite number"),
        ({"dur": None}, "dur", "dur is missing"),
        ({"dur": 1.5e308}, "dur", "dur 1.5e+308 is past the end of the trace's span"),
        ({"ts": None}, "ts", "ts is missing"),
        ({"ts": 1e15}, "ts", "ts 1000000000000000.0 is outside the trace's span"),
    ],
)
def test_impossible_gpu_times_are_refused_naming_the_event_and_field(tmp_path, over, field, problem):
    kernel = _kernel(**over)
    if over.get("dur", 0) is None:
        del kernel["dur"]
    if over.get("ts", 0) is None:
        del kernel["ts"]
    p = _trace(tmp_path, [STEP, LAUNCH, kernel])
    with pytest.raises(TraceError) as e:
        load_trace(p)
    message = str(e.value)
    assert message.startswith(f"{p}: event 2 (kernel 'k'): {problem}") and "\n" not in message
    assert message.endswith("(--lenient drops such events)")


def test_of_several_impossible_events_the_first_in_the_loaders_row_order_is_named(tmp_path):
    # The tables stay in event order until they become pandas tables; the row order the loader has always
    # given them (a block's kinds grouped in order of first appearance) puts both memcpys before the kernel,
    # so the memcpy at event 3 is named, as before, not the kernel at event 2.
    def gpu(cat, name, ts, dur, corr):
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": ts,
            "dur": dur,
            "args": {"correlation": corr},
        }

    p = _trace(
        tmp_path,
        [
            STEP,
            gpu("gpu_memcpy", "HtoD", 1.0, 1.0, 1),
            gpu("kernel", "k", 2.0, -5.0, 2),
            gpu("gpu_memcpy", "DtoH", 3.0, -1.0, 3),
        ],
    )
    with pytest.raises(TraceError, match=r"event 3 \(memcpy 'DtoH'\): dur -1.0 is negative"):
        load_trace(p, use_cache=False)
    t = load_trace(p, use_cache=False, lenient=True)
    assert t.gpu["name"].tolist() == ["HtoD"] and "first: event 3 (memcpy 'DtoH')" in t.warnings[-1]


def test_lenient_drops_impossible_events_with_a_count(tmp_path):
    events = [
        STEP,
        LAUNCH,
        _kernel(),
        _kernel(name="bad", dur=-1.0),
        _kernel(name="worse", dur="nan"),
        dict(STEP, name="ProfilerStep#2", ts=200.0, dur=-5.0),
    ]
    p = _trace(tmp_path, events)
    t = load_trace(p, lenient=True)
    assert t.gpu["name"].tolist() == ["k"] and t.steps["step"].tolist() == [1]
    assert t.warnings == [
        "dropped 3 GPU activities/steps with an impossible ts or dur "
        "(first: event 3 (kernel 'bad'): dur -1.0 is negative)"
    ]
    a = analyze(p, lenient=True)
    assert a.total_us == 5.0 and a.num_steps == 1 and a.warnings[0].startswith("dropped 3")


def test_the_commands_refuse_or_with_lenient_drop_impossible_events(tmp_path):
    """--lenient and --no-cache through the CLI's reader: one line and exit 2 without --lenient (the
    other traces still reported), a counted warning on stderr and in the JSON `notes` with it."""
    import subprocess
    import sys

    bad = _trace(tmp_path, [STEP, LAUNCH, _kernel(), _kernel(name="bad", dur=-1.0)], name="bad.json")
    good = _trace(tmp_path, [STEP, LAUNCH, _kernel()], name="good.json")

    def headroom(*args):
        return subprocess.run(
            [sys.executable, "-m", "headroom.cli", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, HEADROOM_CACHE_DIR=str(tmp_path / "c")),
        )

    p = headroom("classify", "--json", "--no-cache", bad, good)
    assert p.returncode == 2
    assert [json.loads(line)["trace"] for line in p.stdout.splitlines()] == [str(good)]
    assert p.stderr.splitlines() == [
        f"headroom: error: {bad}: event 3 (kernel 'bad'): dur -1.0 is negative (--lenient drops such events)"
    ]
    p = headroom("classify", "--json", "--lenient", "--no-cache", bad, good)
    assert p.returncode == 0, p.stderr
    docs = [json.loads(line) for line in p.stdout.splitlines()]
    assert [d["total_us"] for d in docs] == [5.0, 5.0]
    line = "dropped 1 GPU activity/steps with an impossible ts or dur (first: event 3 (kernel 'bad'): dur -1.0 is negative)"
    assert docs[0]["notes"] == [line] and docs[1]["notes"] == []
    assert p.stderr.splitlines() == [f"headroom: warning: {bad}: {line}"]
    for command in (["report", "--json"], ["project", "--json", "-s", "category:other=2"], ["targets", "--json"]):
        p = headroom(*command, "--lenient", "--no-cache", bad)
        assert p.returncode == 0, (command, p.stderr)
        assert f"headroom: warning: {bad}: dropped 1 GPU activity" in p.stderr
        p = headroom(*command, "--no-cache", bad)
        assert p.returncode == 2 and "(--lenient drops such events)" in p.stderr, command


def test_a_step_with_negative_dur_is_refused(tmp_path):
    p = _trace(tmp_path, [dict(STEP, dur=-3.0), LAUNCH, _kernel()])
    with pytest.raises(TraceError, match=r"event 0 \(user_annotation 'ProfilerStep#1'\): dur -3.0 is negative"):
        load_trace(p)


@pytest.mark.parametrize(
    "content,problem",
    [
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "\xff\xfe"}]}', "invalid UTF-8"),
        (b'{"traceEvents": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}", "nested too deeply"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}, {"ph": ]}', "invalid JSON"),
    ],
)
def test_unreadable_documents_are_one_line(tmp_path, content, problem):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceError, match=problem) as e:
        load_trace(p)
    assert str(e.value).startswith(str(p)) and "\n" not in str(e.value)


def test_gpu_work_without_a_launch_is_placed_by_gpu_time_and_counted():
    # HTA's `base` trace records few runtime events: most of its GPU time has no launch.
    a = analyze(hta_trace("base"))
    assert round(a.total_us) == 1649 and a.num_steps == 2
    assert a.warnings == [
        "8 of 10 GPU activities (1,641 of 1,649 us) have no launch event in the trace; "
        "they are placed in steps by their GPU start time"
    ]


def test_work_launched_before_recording_stays_out_of_the_steps():
    # Real H200 traces hold the warm-up step's kernels still running when recording began.
    a = analyze(SHIPPED_TRACES / "dlrm.train.json.gz")
    assert a.warnings == [] and round(a.total_us, 3) == 56993.614


def test_a_trace_larger_than_memory_gets_one_line(tmp_path, monkeypatch):
    p = _trace(tmp_path, [STEP, LAUNCH, _kernel()])
    monkeypatch.setattr(parallel, "memory_available", lambda: 100)
    with pytest.raises(TraceError, match=r"needs about 0\.0 GiB of memory to load, 0\.0 GiB is available"):
        load_trace(p, use_cache=False)


# --- the streamed split, the whole-document fallback and the worker ------------------------


def test_streamed_chunks_whole_document_and_worker_give_the_same_tables(monkeypatch):
    path = SHIPPED_TRACES / "resnet-50.train.json.gz"
    streamed = load_trace(path, use_cache=False)
    monkeypatch.setattr(document, "BLOCK", 1 << 16)  # many small chunks
    small = load_trace(path, use_cache=False)
    monkeypatch.setattr(parallel, "WORKER_MIN_BYTES", 0)
    monkeypatch.setenv("HEADROOM_LOAD_WORKERS", "1")
    worker = load_trace(path, use_cache=False)
    monkeypatch.setattr(document, "split", lambda p, block=None: (_ for _ in ()).throw(document.Fallback()))
    whole = load_trace(path, use_cache=False)
    for other in (small, worker, whole):
        _assert_same(streamed, other)
    assert len(streamed.flows) == 708  # fwdbwd start/finish pairs


def test_chunks_scanned_ahead_are_the_chunks_scanned_in_turn(tmp_path, monkeypatch):
    """The scan-ahead thread (a chunk's scan running beside the previous chunk's tables) changes no chunk, no
    order and no table: plain, compact and gzip files in many chunks, and chunks the scanner declines among them
    (an escaped key: the msgspec path decodes those)."""
    from polars.testing import assert_frame_equal

    monkeypatch.setattr(document, "BLOCK", 1 << 16)
    text = gzip.decompress((SHIPPED_TRACES / "resnet-50.train.json.gz").read_bytes())
    plain = tmp_path / "resnet.json"
    plain.write_bytes(text)
    declined = tmp_path / "declined.json"
    parts = text.split(b'"dur":')
    declined.write_bytes(
        b"".join(p + (b'"d\\u0075r":' if i % 500 == 250 else b'"dur":') for i, p in enumerate(parts[:-1])) + parts[-1]
    )
    compact = tmp_path / "compact.json"  # "},{": the next chunk's "[" lands where this chunk's "]" is
    compact.write_text(json.dumps(json.loads(text), separators=(",", ":")))
    declined_chunks = 0
    for path in (plain, declined, compact, SHIPPED_TRACES / "resnet-50.train.json.gz"):
        turn, turn_doc = chunks.decode_chunks(path, document.split(path), ahead=False)
        ahead, ahead_doc = chunks.decode_chunks(path, document.split(path), ahead=True)
        assert len(turn) == len(ahead) > 20
        assert (turn_doc.meta, turn_doc.base_ns) == (ahead_doc.meta, ahead_doc.base_ns)
        for a, b in zip(turn, ahead):
            assert (a.events, dict(a.unreadable)) == (b.events, dict(b.unreadable))
            for t in a.tables:
                assert_frame_equal(a.tables[t], b.tables[t], categorical_as_str=True)
        if path == declined:
            declined_chunks = sum(
                _scan_of(item[0]) is None for item in document.split(path) if not isinstance(item, document.Document)
            )
    assert declined_chunks >= 3  # the msgspec path took part in the run
    monkeypatch.setenv("HEADROOM_SCAN_AHEAD", "0")
    assert not parallel.scan_ahead(True)
    one_thread = load_trace(declined, use_cache=False)
    monkeypatch.delenv("HEADROOM_SCAN_AHEAD")
    _assert_same(one_thread, load_trace(declined, use_cache=False))


def _scan_of(chunk):
    return scan.EXTENSION.Scanner().scan(bytes(chunk))


def _spy_halves(monkeypatch):
    """Record each second half the worker is given (the file's byte where it starts)."""
    given = []
    submit = load.Worker.submit_half
    monkeypatch.setattr(
        load.Worker,
        "submit_half",
        lambda self, p, start, prefix, folder=None: given.append(start) or submit(self, p, start, prefix, folder),
    )
    monkeypatch.setattr(parallel, "WORKER_MIN_BYTES", 0)
    monkeypatch.setenv("HEADROOM_LOAD_WORKERS", "1")
    return given


def test_a_plain_file_decoded_in_two_halves_gives_the_same_tables(tmp_path, monkeypatch):
    path = tmp_path / "resnet.json"
    path.write_bytes(gzip.decompress((SHIPPED_TRACES / "resnet-50.train.json.gz").read_bytes()))
    alone = load_trace(path, use_cache=False)
    given = _spy_halves(monkeypatch)
    monkeypatch.setattr(document, "BLOCK", 1 << 16)  # several chunks on each side
    halves = load_trace(path, use_cache=False)
    assert len(given) == 1 and 0.5 * path.stat().st_size < given[0] < 0.8 * path.stat().st_size
    _assert_same(alone, halves)
    assert len(halves.flows) == 708 and len(halves.gpu) == len(alone.gpu) > 0


def _spill_folders(monkeypatch, tmp_path) -> Path:
    """Put the worker's part files under tmp_path/spill (so the test can see them)."""
    base = tmp_path / "spill"
    base.mkdir()
    monkeypatch.setattr(parallel, "spill_base", lambda size: str(base))
    return base


def test_the_workers_parts_come_back_through_files_then_the_files_are_gone(tmp_path, monkeypatch):
    path = tmp_path / "resnet.json"
    path.write_bytes(gzip.decompress((SHIPPED_TRACES / "resnet-50.train.json.gz").read_bytes()))
    alone = load_trace(path, use_cache=False)
    base = _spill_folders(monkeypatch, tmp_path)
    _spy_halves(monkeypatch)
    monkeypatch.setattr(document, "BLOCK", 1 << 16)
    read_back: list[int] = []
    unspill = chunks.unspill
    monkeypatch.setattr(chunks, "unspill", lambda part: read_back.append(len(part.files)) or unspill(part))
    halves = load_trace(path, use_cache=False)
    _assert_same(alone, halves)
    assert read_back and all(n == len(kineto.TABLES) for n in read_back)  # every part came as files
    assert list(base.iterdir()) == []


def test_a_part_that_cannot_be_written_goes_through_the_pipe(tmp_path):
    from headroom.trace.kineto import decode_events

    part = decode_events(json.dumps([STEP, LAUNCH, _kernel(name="k")]).encode())
    tables = {t: f.clone() for t, f in part.tables.items()}
    kept = chunks.spill(part, tmp_path / "no-such-folder", 0)
    assert kept.files == {} and set(kept.tables) == set(tables)
    assert list(tmp_path.iterdir()) == []
    written = chunks.spill(part, tmp_path, 3)
    assert written.tables == {} and sorted(Path(f).name for f in written.files.values()) == sorted(
        f"3.{t}.arrow" for t in tables
    )
    back = chunks.unspill(written)
    assert all(back.tables[t].equals(tables[t]) for t in tables) and list(tmp_path.iterdir()) == []


def test_the_spill_folder_is_removed_when_the_worker_fails(tmp_path, monkeypatch):
    p = _trace(tmp_path, [STEP, LAUNCH] + [_kernel(name=f"k{i}") for i in range(300)])
    base = _spill_folders(monkeypatch, tmp_path)
    _spy_halves(monkeypatch)
    monkeypatch.setattr(
        chunks,
        "from_worker",
        lambda helper, last=True: (_ for _ in ()).throw(TraceError("the loader's worker process failed (test)")),
    )
    with pytest.raises(TraceError, match="worker process failed"):
        load_trace(p, use_cache=False)
    assert list(base.iterdir()) == []


def test_two_halves_divided_inside_a_string_fall_back_to_one_run(tmp_path, monkeypatch):
    tricky = [_kernel(name='a}, {"ph": "X"'), _kernel(name="b")]
    p = tmp_path / "t.json"
    # each copy at its own time: equal records would be refused as one activity recorded twice
    p.write_text(
        json.dumps({"traceEvents": [STEP, LAUNCH, *(dict(e, ts=10.0 + i) for i in range(20) for e in tricky)]})
    )
    expected = load_trace(p, use_cache=False)
    given = _spy_halves(monkeypatch)
    text = p.read_bytes()
    inside = text.index(b"a}, {", len(text) // 2) + 1  # the "}" of a separator inside a name
    monkeypatch.setattr(
        document,
        "halves",
        lambda path, fraction: document.Halves(close=inside, open=inside + 3, prefix=text[: text.index(b"[")]),
    )
    got = load_trace(p, use_cache=False)
    assert given == [inside + 3]
    _assert_same(expected, got)


@pytest.mark.parametrize("where", [0.2, 0.9])
def test_invalid_json_in_either_half_is_the_same_one_line(tmp_path, monkeypatch, where):
    events = [STEP, LAUNCH] + [_kernel(name=f"k{i}") for i in range(300)]
    p = _trace(tmp_path, events)
    text = bytearray(p.read_bytes())
    at = text.index(b'"ts"', int(len(text) * where))
    text[at : at + 4] = b'"ts '  # an unterminated key
    p.write_bytes(bytes(text))
    with pytest.raises(TraceError) as alone:
        load_trace(p, use_cache=False)
    given = _spy_halves(monkeypatch)
    with pytest.raises(TraceError) as halves:
        load_trace(p, use_cache=False)
    assert len(given) == 1
    # The same file, the same problem, the same byte (worded "near byte N" or "(byte N)" by where it is found).
    byte = [re.search(r"byte (\d+)", str(e.value)).group(1) for e in (alone, halves)]
    assert byte[0] == byte[1] and abs(int(byte[0]) - at) < 16
    assert all(str(e.value).startswith(f"{p}: invalid JSON (") for e in (alone, halves))


@pytest.mark.parametrize(
    "cores,others,env,wanted",
    [
        (2, 0, None, 1),
        (2, 1, None, 0),
        (4, 2, None, 1),
        (4, 3, None, 0),
        (1, 0, None, 0),
        (2, 1, "1", 1),
        (8, 0, "0", 0),
    ],
)
def test_the_worker_runs_only_when_a_core_is_free_now(monkeypatch, cores, others, env, wanted):
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(parallel, "other_runnable_tasks", lambda: others)
    if env is None:
        monkeypatch.delenv("HEADROOM_LOAD_WORKERS", raising=False)
    else:
        monkeypatch.setenv("HEADROOM_LOAD_WORKERS", env)
    assert parallel.workers_wanted() == wanted


def test_runnable_tasks_are_read_from_proc_loadavg():
    assert parallel.runnable_others("0.65 0.77 0.70 3/93 29442") == 2  # the reader itself is one
    assert parallel.runnable_others("2.00 1.00 0.50 1/120 7") == 0
    with pytest.raises((IndexError, ValueError)):
        parallel.runnable_others("0.65 0.77")


def test_a_separator_inside_a_string_or_nested_value_is_not_a_cut(tmp_path, monkeypatch):
    tricky = [
        _kernel(name='a}, {"ph": "X"'),
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "op",
            "pid": 1,
            "tid": 1,
            "ts": 1.0,
            "dur": 1.0,
            "args": {"list": [{"a": 1}, {"b": 2}]},
        },
    ]
    p = tmp_path / "t.json"
    p.write_text(
        json.dumps({"traceEvents": [STEP, LAUNCH, *(dict(e, ts=10.0 + i) for i in range(20) for e in tricky)]})
    )
    expected = load_trace(p, use_cache=False)
    monkeypatch.setattr(document, "BLOCK", 64)
    _assert_same(expected, load_trace(p, use_cache=False))
    assert expected.gpu["name"].tolist() == ['a}, {"ph": "X"'] * 20


# --- the cache ---------------------------------------------------------------------------


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(d))
    monkeypatch.setenv("HEADROOM_CACHE_MIN_BYTES", "0")
    return d


def test_cached_and_uncached_loads_give_identical_tables_and_analyses(cache_dir, tmp_path):
    src = SHIPPED_TRACES / "dlrm.train.json.gz"
    p = tmp_path / src.name
    p.write_bytes(src.read_bytes())
    uncached = analyze(p, use_cache=False)
    assert not cache_dir.exists()
    first = analyze(p)  # fills the cache
    entries = list(cache_dir.glob("*/*/header.json"))
    assert len(entries) == 1 and list(entries[0].parent.glob("attributed-*.frames"))
    second = analyze(p)  # reads it
    for a in (first, second):
        _assert_same(uncached.trace, a.trace)
        pd.testing.assert_frame_equal(uncached.events, a.events)
        assert (a.total_us, a.busy_us, a.wall_us) == (uncached.total_us, uncached.busy_us, uncached.wall_us)
    # An edited trace (new size/mtime) never reads the old entry, and replaces it.
    doc = json.loads(gzip.decompress(p.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel" or e["name"] != "dummy"][:-5]
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    os.utime(p, ns=(1, 1))
    _assert_same(load_trace(p, use_cache=False), load_trace(p))
    assert len(list(cache_dir.glob("*/*/header.json"))) == 1


def _assert_same_analysis(a, b):
    from headroom.trace.stored import FRAMES

    for f in FRAMES:
        pd.testing.assert_frame_equal(getattr(a, f), getattr(b, f), obj=f)
    for n in (
        "source",
        "mode",
        "window",
        "num_steps",
        "n_devices",
        "total_us",
        "busy_us",
        "wall_us",
        "idle_us",
        "addressable_us",
        "basis",
        "notes",
        "warnings",
        "metadata",
    ):
        assert getattr(a, n) == getattr(b, n), n
    assert a.to_dict(all_kernels=True) == b.to_dict(all_kernels=True)


@pytest.mark.parametrize("name", ["llama-7b.infer.prefill.json.gz", "resnet-50.train.json.gz"])
def test_the_second_analysis_is_read_whole_from_the_cache_and_reads_no_table(cache_dir, tmp_path, name):
    p = tmp_path / name
    p.write_bytes((SHIPPED_TRACES / name).read_bytes())
    uncached = analyze(p, use_cache=False)
    analyze(p)  # fills the cache: tables, then the analysis
    assert len(list(cache_dir.glob("*/*/analysis-*.frames/frames.npz"))) == 1
    second = analyze(p)
    assert isinstance(second.trace, load.DeferredTrace)
    assert not set(load.TRACE_TABLES) & set(second.trace.__dict__)  # no table read to answer
    _assert_same_analysis(uncached, second)
    _assert_same(uncached.trace, second.trace)  # read when first used
    assert set(load.TRACE_TABLES) <= set(second.trace.__dict__)


def test_an_analysis_with_other_rules_or_another_window_is_not_the_cached_one(cache_dir, tmp_path):
    p = tmp_path / "llama.json.gz"
    p.write_bytes((SHIPPED_TRACES / "llama-7b.infer.prefill.json.gz").read_bytes())
    plain = analyze(p)
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\ncategory = "sort"\nkernel = "gemm|gemv|cutlass|sm90|sm80"\n')
    mine = analyze(p, rules=rules)
    assert mine.categories.loc["sort", "us"] > plain.categories["us"].get("sort", 0.0) + 1000
    _assert_same_analysis(mine, analyze(p, rules=rules, use_cache=False))
    whole = analyze(p, whole_trace=True)
    assert whole.basis == "whole trace" and analyze(p).basis == "ProfilerStep ranges"
    assert len(list(cache_dir.glob("*/*/analysis-*.frames"))) == 3


def test_a_cached_trace_whose_tables_vanished_is_loaded_again(cache_dir, tmp_path):
    p = tmp_path / "resnet.json.gz"
    p.write_bytes((SHIPPED_TRACES / "resnet-50.train.json.gz").read_bytes())
    expected = load_trace(p, use_cache=False)
    load_trace(p)
    deferred = load_trace(p)
    assert isinstance(deferred, load.DeferredTrace)
    for tables in cache_dir.glob("*/*/tables.npz"):
        tables.unlink()  # another process replaced the entry meanwhile
    _assert_same(expected, deferred)


def test_a_deferred_trace_reads_each_table_from_the_entry_it_opened(cache_dir, tmp_path):
    """Tables read at different times come from one entry, even when the entry is removed in between
    (the open file stays readable); only the tables asked for are read."""
    p = tmp_path / "resnet.json.gz"
    p.write_bytes((SHIPPED_TRACES / "resnet-50.train.json.gz").read_bytes())
    expected = load_trace(p, use_cache=False)
    load_trace(p)
    deferred = load_trace(p)
    pd.testing.assert_frame_equal(deferred.launches, expected.launches)
    assert "gpu" not in deferred.__dict__ and "cpu" not in deferred.__dict__
    for entry in cache_dir.glob("*/*/tables.npz"):
        shutil.rmtree(entry.parent)
    _assert_same(expected, deferred)
    assert deferred.__dict__["_stored"]._file.zip is None  # closed once every table was read


def test_a_damaged_entry_after_a_table_was_read_is_an_error_not_a_mix(cache_dir, tmp_path, monkeypatch):
    p = tmp_path / "resnet.json.gz"
    p.write_bytes((SHIPPED_TRACES / "resnet-50.train.json.gz").read_bytes())
    load_trace(p)
    deferred = load_trace(p)
    _ = deferred.launches
    monkeypatch.setattr(cache.StoredTables, "read", lambda self, t: (_ for _ in ()).throw(ValueError("bad zip")))
    with pytest.raises(TraceError, match=r"could not be read \(it is removed: run again\)"):
        _ = deferred.cpu
    assert not list(cache_dir.glob("*/*/tables.npz"))
    again = load_trace(p)  # the first table fails: loaded from the file instead
    expected = load_trace(p, use_cache=False)
    pd.testing.assert_frame_equal(again.cpu, expected.cpu)


def test_frames_the_cache_cannot_read_back_the_same_are_not_stored(cache_dir, tmp_path):
    p = _trace(tmp_path, [STEP, LAUNCH, _kernel()])
    load_trace(p)
    k = cache.key(p, False)
    keyed = pd.DataFrame({"x": [1.0, 2.0]}, index=["a", "b"])
    assert not cache.store_frames(k, "t1", {"f": keyed}, {})  # an index it would lose
    assert not cache.store_frames(k, "t2", {"f": pd.DataFrame({"x": [[1], [2]]})}, {})  # lists
    assert not cache.store_frames(k, "t3", {"f": pd.DataFrame({"x": [1]})}, {"h": object()})  # no JSON
    frames = {
        "f": pd.DataFrame(
            {
                "x": [1.5, 2.5],
                "t": ["a", "b"],
                "b": [True, False],
                "c": pd.Categorical(["u", "v"], categories=["v", "u"]),
            }
        )
    }
    assert cache.store_frames(k, "t4", frames, {"n": 3})
    got, header = cache.fetch_frames(k, "t4")
    pd.testing.assert_frame_equal(got["f"], frames["f"])
    assert header == {"n": 3} and cache.fetch_frames(k, "t1") is None


def test_lenient_and_strict_loads_have_their_own_entries(cache_dir, tmp_path):
    p = _trace(tmp_path, [STEP, LAUNCH, _kernel(), _kernel(name="bad", dur=-1.0)])
    assert load_trace(p, lenient=True).warnings
    with pytest.raises(TraceError, match="negative"):
        load_trace(p)  # the lenient entry does not answer a strict load
    assert load_trace(p, lenient=True).warnings[0].startswith("dropped 1")


def test_concurrent_loads_write_one_whole_entry(cache_dir, tmp_path):
    src = SHIPPED_TRACES / "resnet-50.train.json.gz"
    p = tmp_path / src.name
    p.write_bytes(src.read_bytes())
    expected = load_trace(p, use_cache=False)
    results, errors = [], []

    def run():
        try:
            results.append(load_trace(p))
        except Exception as e:  # pragma: no cover - the assertion below reports it
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4
    for r in results + [load_trace(p)]:
        _assert_same(expected, r)
    assert len(list(cache_dir.glob("*/*/header.json"))) == 1 and not list(cache_dir.glob("*/.*"))


def test_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(blocker / "cache"))  # a path under a file
    monkeypatch.setenv("HEADROOM_CACHE_MIN_BYTES", "0")
    p = _trace(tmp_path, [STEP, LAUNCH, _kernel()])
    assert load_trace(p).gpu["name"].tolist() == ["k"]
    assert cache.key(p, False) is not None


# --- both decode paths, on generated traces -----------------------------------------------

NUMBER = st.one_of(
    st.integers(-5, 10**6), st.floats(allow_nan=False, allow_infinity=False, width=64, min_value=-1e6, max_value=1e6)
)
# The spellings the lenient path accepts: numbers as text, ids as hex text.
LOOSE_NUMBER = st.one_of(NUMBER, NUMBER.map(repr))
ID = st.one_of(st.integers(0, 2**63 - 1), st.integers(0, 2**70), st.integers(0, 4095).map(hex))
CATEGORY = st.sampled_from(
    [
        "kernel",
        "Kernel",
        "gpu_memcpy",
        "gpu_memset",
        "cuda_runtime",
        "cuda_driver",
        "cpu_op",
        "user_annotation",
        "python_function",
        "gpu_user_annotation",
        "ac2g",
        "fwdbwd",
        "overhead",
        "Trace",
    ]
)
NAME = st.one_of(
    st.sampled_from(["aten::mm", "nn.Module: Linear", "ProfilerStep#1", "cudaLaunchKernel", 'a}, {"ph"', "x\\ny"]),
    st.text(max_size=8),
)


@st.composite
def event_text(draw) -> str:
    """One event as JSON text, sometimes with a key given twice (the last one counts, as in json.loads)."""
    fields = {
        "ph": draw(st.sampled_from(["X", "X", "X", "s", "f", "i", "M"])),
        "cat": draw(CATEGORY),
        "name": draw(NAME),
        "pid": draw(st.one_of(st.integers(0, 3), st.just("Spans"))),
        "tid": draw(st.integers(0, 3)),
        "ts": draw(LOOSE_NUMBER if draw(st.booleans()) else NUMBER),
        "dur": draw(NUMBER),
        "id": draw(ID),
    }
    args = {k: draw(ID) for k in draw(st.sets(st.sampled_from(["External id", "correlation", "device", "stream"])))}
    if draw(st.booleans()):
        args["bytes"] = draw(NUMBER)
    parts = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in fields.items() if draw(st.integers(0, 9))]
    parts.append(f'"args": {json.dumps(args)}')
    if draw(st.booleans()):  # a duplicate key
        key = draw(st.sampled_from(["ts", "dur", "name", "cat"]))
        value = {"ts": NUMBER, "dur": NUMBER, "name": NAME, "cat": CATEGORY}[key]
        parts.append(f"{json.dumps(key)}: {json.dumps(draw(value))}")
    return "{" + ", ".join(draw(st.permutations(parts))) + "}"


def _load_or_error(path, lenient=True):
    try:
        return load_trace(path, lenient=lenient, use_cache=False)
    except TraceError as e:
        return str(e)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event_text(), max_size=25), layout=st.sampled_from(["kineto", "one line"]))
def test_scanned_fast_lenient_streamed_and_whole_paths_agree_on_generated_traces(tmp_path_factory, events, layout):
    sep = ",\n  " if layout == "kineto" else ", "
    path = tmp_path_factory.mktemp("gen") / "gen.json"
    path.write_text('{"traceEvents": [' + sep.join(events) + "]}")
    reference = _load_or_error(path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(document, "BLOCK", 97)  # streamed in tiny chunks
        small = _load_or_error(path)
        mp.setattr(scan, "SCANNER", None)  # every chunk by msgspec's typed structs (or lenient)
        fast = _load_or_error(path)
        mp.setattr(kineto, "EVENTS", _RefuseFast())  # every chunk on the lenient path
        lenient = _load_or_error(path)
        mp.setattr(document, "split", lambda p, block=None: (_ for _ in ()).throw(document.Fallback()))
        whole = _load_or_error(path)
    for other in (small, fast, lenient, whole):
        if isinstance(reference, str) or isinstance(other, str):
            assert reference == other
        else:
            _assert_same(reference, other)
    if not isinstance(reference, str):
        _check_against_json_loads(path, reference)


class _RefuseFast:
    def decode(self, doc):
        raise msgspec.ValidationError("fast path refused by the test")


def _check_against_json_loads(path, trace):
    """Every X event of a GPU category that json.loads reads (last duplicate key wins) is a GPU row."""
    doc = json.loads(path.read_text())
    expected, without_ph = [], 0
    for i, e in enumerate(doc["traceEvents"]):
        if str(e.get("cat")).lower() in kineto.GPU_CATEGORIES:
            if e.get("ph") == "X":
                expected.append((i, e.get("name", ""), float(e["dur"]) if "dur" in e else None))
            without_ph += "ph" not in e  # GPU work that cannot be read: refused, or dropped and counted
    got = list(zip(trace.gpu["index"].tolist(), trace.gpu["name"].tolist(), trace.gpu["dur"].tolist()))
    dropped = int(trace.warnings[-1].split()[1]) if trace.warnings and trace.warnings[-1].startswith("dropped") else 0
    # The same line counts the ProfilerStep ranges dropped for impossible times.
    steps = sum(
        1
        for e in doc["traceEvents"]
        if e.get("ph") == "X"
        and isinstance(e.get("cat"), str)
        and kineto.TABLE_OF_CATEGORY.get(e["cat"].lower()) in (("cpu", "cpu_op"), ("cpu", "user_annotation"))
        and str(e.get("name", "")).startswith("ProfilerStep")
    )
    steps_dropped = steps - int(trace.cpu["name"].astype(str).str.startswith("ProfilerStep").sum())
    assert sorted(got) == sorted(g for g in expected if g[0] in {x[0] for x in got})
    assert len(expected) + without_ph - len(got) + steps_dropped == dropped
    assert all(math.isfinite(d) and d >= 0 for _, _, d in got)


# --- the real traces: the same tables as the loader before the streamed one --------------------

FINGERPRINTS = json.loads((Path(__file__).parent / "data" / "loader_fingerprints.json").read_text())


@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_real_traces_load_into_the_same_tables_as_before(name):
    """Fingerprints recorded with an independent loader (polars ndjson, before this streamed one, with the
    module columns and the fwdbwd pairs): every table's rows and every column's
    values, in row order (lab/probes/tables_check.py compares the whole tables and analyses).
    The nine module-ranged traces in traces/ were recorded where the three decode paths (C scanner,
    msgspec structs, lenient structs) gave the same fingerprint, with the GPU rows and fwdbwd pairs
    equal to the counts in the JSON itself."""
    where, file = name.split("__", 1)
    path = SHIPPED_TRACES / file.replace("__", "/") if where == "traces" else hta_trace(file.split("__")[0])
    assert fingerprint_tables(load_trace(path, use_cache=False)) == FINGERPRINTS[name]


def test_a_directory_of_ranks_loads_two_at_a_time_into_the_same_tables(tmp_path, monkeypatch):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for i, name in enumerate(["dlrm.train.json.gz", "resnet-50.train.json.gz", "bert-base.infer.json.gz"]):
        (ranks / f"rank-{i}.json.gz").write_bytes((SHIPPED_TRACES / name).read_bytes())
    monkeypatch.setenv("HEADROOM_LOAD_WORKERS", "0")
    one_at_a_time = load.load_traces(ranks, use_cache=False)
    submitted = []
    submit_file = load.Worker.submit_file
    monkeypatch.setattr(
        load.Worker, "submit_file", lambda self, p, lenient: submitted.append(p.name) or submit_file(self, p, lenient)
    )
    monkeypatch.setenv("HEADROOM_LOAD_WORKERS", "1")
    two_at_a_time = load.load_traces(ranks, use_cache=False)
    assert submitted == ["rank-1.json.gz"]  # every other file (the test below)
    assert [t.source for t in two_at_a_time] == [t.source for t in one_at_a_time]
    for a, b in zip(one_at_a_time, two_at_a_time):
        _assert_same(a, b)
    (ranks / "rank-1.json.gz").write_bytes(b"{")  # an error in the worker is the caller's one line
    with pytest.raises(TraceError, match=r"rank-1.json.gz: invalid JSON"):
        load.load_traces(ranks, use_cache=False)


def test_the_worker_decodes_every_other_rank_when_a_core_is_free_and_the_files_are_small(tmp_path, monkeypatch):
    """Handed each next file, the worker was the slower side (benchmarks/rank_directory.py): it takes every
    other one; files that are decoded in two halves, or no free core, and it takes none."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for i, name in enumerate(["resnet-50.train.json.gz", "bert-base.infer.json.gz"] * 2):
        (ranks / f"rank-{i}.json.gz").write_bytes((SHIPPED_TRACES / name).read_bytes())
    submitted = []
    submit_file = load.Worker.submit_file
    monkeypatch.setattr(
        load.Worker, "submit_file", lambda self, p, lenient: submitted.append(p.name) or submit_file(self, p, lenient)
    )
    monkeypatch.delenv("HEADROOM_LOAD_WORKERS", raising=False)
    monkeypatch.setattr(parallel, "workers_wanted", lambda: 1)  # a free core
    traces = load.load_traces(ranks, use_cache=False)
    assert submitted == ["rank-1.json.gz", "rank-3.json.gz"]
    assert [Path(t.source).name for t in traces] == [f"rank-{i}.json.gz" for i in range(4)]
    submitted.clear()
    monkeypatch.setattr(parallel, "WORKER_MIN_BYTES", parallel.text_bytes(ranks / "rank-1.json.gz"))  # big files
    load.load_traces(ranks, use_cache=False)
    assert submitted == []
    monkeypatch.setenv("HEADROOM_LOAD_WORKERS", "1")  # asked for: big files too
    load.load_traces(ranks, use_cache=False)
    assert submitted == ["rank-1.json.gz", "rank-3.json.gz"]
    submitted.clear()
    monkeypatch.setattr(parallel, "workers_wanted", lambda: 0)  # no free core
    load.load_traces(ranks, use_cache=False)
    assert submitted == []


def test_a_deferred_trace_pickles_whole(cache_dir, tmp_path):
    """A copy of a deferred trace whose entry file is open holds every table (an open file cannot be
    pickled, and its later reads must not come from another entry or load)."""
    import pickle

    p = tmp_path / "resnet.json.gz"
    p.write_bytes((SHIPPED_TRACES / "resnet-50.train.json.gz").read_bytes())
    expected = load_trace(p, use_cache=False)
    load_trace(p)
    deferred = load_trace(p)
    _ = deferred.launches  # the entry's file is open now
    copy = pickle.loads(pickle.dumps(deferred))
    shutil.rmtree(next(cache_dir.glob("*/*/tables.npz")).parent)
    assert set(load.TRACE_TABLES) <= set(copy.__dict__)
    _assert_same(expected, copy)


def test_fwdbwd_flow_ids_beyond_64_bits_link_as_python_ints(tmp_path):
    """A fwdbwd flow whose id needs more than 64 bits (hypothesis found one that raised polars'
    'cannot convert i128 to NumPy'): its pair is linked, the id kept whole as a Python int."""
    big = 2**70 + 3
    flow = {"cat": "fwdbwd", "name": "fwdbwd", "pid": 1, "tid": 1, "bp": "e"}
    p = _trace(
        tmp_path,
        [
            STEP,
            LAUNCH,
            _kernel(),
            {**flow, "ph": "s", "id": big, "ts": 10.0},
            {**flow, "ph": "f", "id": big, "ts": 20.0, "tid": 2},
            {**flow, "ph": "f", "id": 7, "ts": 30.0},
        ],
    )
    pairs = load_trace(p, use_cache=False).flows
    assert pairs["id"].tolist() == [big] and pairs["id"].dtype == object
    assert (pairs["start_ts"].tolist(), pairs["end_ts"].tolist(), pairs["end_tid"].tolist()) == ([10.0], [20.0], ["2"])
    small = load_trace(
        _trace(
            tmp_path,
            [
                STEP,
                LAUNCH,
                _kernel(),
                {**flow, "ph": "s", "id": 5, "ts": 10.0},
                {**flow, "ph": "f", "id": 5, "ts": 20.0},
            ],
            name="small.json",
        ),
        use_cache=False,
    ).flows
    assert small["id"].tolist() == [5] and small["id"].dtype == np.int64


# --- impossible traces beyond one event's times --------------------------------------------------


def _three_steps(builder, dur: float = 100.0):
    for n, t0 in ((1, 0.0), (2, 100.0), (3, 200.0)):
        builder.step(n, t0, dur)
        builder.cpu("aten::mm", t0 + 1, 10)
        builder.kernel("sm90_gemm", launch_ts=t0 + 2, ts=t0 + 10, dur=50)


def test_a_gpu_activity_recorded_twice_is_refused_or_dropped_not_counted_twice(builder, tmp_path):
    _three_steps(builder)
    kernel = next(e for e in builder.events if e["cat"] == "kernel")
    builder.events.append(dict(kernel))  # the same kernel twice: two kernels at once on one stream
    p = builder.write(tmp_path / "dup.json")
    with pytest.raises(
        TraceError,
        match=r"event \d+ \(kernel 'sm90_gemm'\): ts 10.0 is a second record of an "
        r"earlier GPU activity \(same device, stream, name, start and duration\) "
        r"\(--lenient drops such events\)",
    ):
        load_trace(p, use_cache=False)
    a = analyze(p, lenient=True, use_cache=False)
    assert a.total_us == 150.0 and a.busy_us == 150.0  # not 200: the copy is dropped, and counted
    assert any("dropped 1 GPU activity/steps" in w for w in a.warnings)


def test_overlapping_steps_are_refused_or_the_later_dropped(builder, tmp_path):
    _three_steps(builder)
    builder.step(4, 150.0, 100.0)  # starts inside ProfilerStep#2
    builder.kernel("sm90_gemm", launch_ts=152.0, ts=160.0, dur=20)
    p = builder.write(tmp_path / "overlap.json")
    with pytest.raises(
        TraceError,
        match=r"ProfilerStep#4'\): ts 150.0 is inside an earlier step "
        r"\(ProfilerStep#2 ends 50 us later\): steps may not overlap",
    ):
        load_trace(p, use_cache=False)
    t = load_trace(p, lenient=True, use_cache=False)
    assert t.steps["step"].tolist() == [1, 2, 3] and len(t.gpu) == 4


def test_a_kernel_far_longer_than_the_trace_is_refused(builder, tmp_path):
    # a 5-second kernel inside a trace of three 20 ms steps
    for n in range(3):
        builder.step(n + 1, n * 20_000.0, 20_000.0)
        builder.kernel("sm90_gemm", launch_ts=n * 20_000.0 + 5, ts=n * 20_000.0 + 10, dur=100)
    builder.kernel("sm90_gemm", launch_ts=20_100.0, ts=20_200.0, dur=5e6)
    p = builder.write(tmp_path / "long.json")
    with pytest.raises(
        TraceError,
        match=r"dur 5000000.0 is longer than the trace could have recorded "
        r"\(at most 121000 us: twice its CPU side's span and 1 ms\)",
    ):
        load_trace(p, use_cache=False)
    assert len(load_trace(p, lenient=True, use_cache=False).gpu) == 3


def test_programmatic_dependent_launch_overlap_on_one_stream_is_kept():
    # ResNet-50 on the H200: cuDNN's init kernels start before the dgrad kernel before them ends
    t = load_trace(SHIPPED_TRACES / "resnet-50.train.json.gz")
    k = t.gpu[(t.gpu["device"] == 0) & (t.gpu["stream"] == 7)].sort_values("ts")
    overlap = (k["ts"] + k["dur"]).cummax().shift().to_numpy()[1:] - k["ts"].to_numpy()[1:]
    assert (overlap > 1.0).sum() > 50 and t.warnings == []


def test_a_trace_rewritten_in_place_with_its_size_and_mtime_is_not_answered_from_the_cache(
    cache_dir, builder, tmp_path
):
    p = tmp_path / "t.json"
    for n in (1, 2, 3):
        builder.step(n, n * 100.0, 100.0)
        builder.kernel("sm90_gemm", launch_ts=n * 100.0 + 2, ts=n * 100.0 + 10, dur=50)
    builder.write(p)
    first = analyze(p)
    assert first.total_us == 150.0 and list(cache_dir.glob("*/*/tables.npz"))
    st = p.stat()
    text = p.read_text().replace('"dur": 50', '"dur": 40')  # the same length
    p.write_text(text)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # the old mtime put back
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns
    assert analyze(p).total_us == 120.0  # was 150.0: the stale entry


@pytest.mark.parametrize("damage", ["tables.npz", "header.json"])
def test_a_damaged_cache_entry_is_rewritten_by_the_next_load(cache_dir, tmp_path, damage):
    p = tmp_path / "resnet.json.gz"
    p.write_bytes((SHIPPED_TRACES / "resnet-50.train.json.gz").read_bytes())
    expected = load_trace(p, use_cache=False)
    load_trace(p)
    (entry,) = {f.parent for f in cache_dir.glob("*/*/tables.npz")}
    (entry / damage).write_bytes(b"not what was written")
    _assert_same(expected, load_trace(p))  # loaded from the file ...
    hit = load_trace(p)
    assert isinstance(hit, load.DeferredTrace)  # ... and the entry written again
    _assert_same(expected, hit)
    assert (entry / damage).read_bytes() != b"not what was written"
