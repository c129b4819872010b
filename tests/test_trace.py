import gzip
import json

import msgspec
import numpy as np
import pandas as pd
import pytest

import headroom.trace.document as document
import headroom.trace.kineto as trace_module
import headroom.trace.scan as scan
from headroom.trace.load import TraceError, find_trace_files, load_trace, load_traces
from tests.conftest import SHIPPED_TRACES, hta_trace


def _count(path, cats):
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats)


def test_nccl_trace_tables_match_raw_event_counts():
    path = hta_trace("nccl_parser_config")
    t = load_trace(path)
    assert len(t.gpu) == _count(path, {"kernel", "gpu_memcpy", "gpu_memset"}) == 2700 + 960 + 114
    assert (t.gpu["kind"] == "kernel").sum() == 2700
    assert len(t.launches) == _count(path, {"cuda_runtime", "cuda_driver"})
    assert t.base_ns == 1711964646000000000
    assert t.metadata["deviceProperties"][0]["name"].startswith("NVIDIA A100")
    # String pids ("Spans") and int pids coexist in the file; GPU rows keep numeric device/stream.
    assert t.gpu["device"].dtype == np.int64 and set(t.gpu["stream"]) >= {7}


def test_steps_come_from_cpu_side_only():
    # The AMD trace repeats ProfilerStep#1 as a gpu_user_annotation on the GPU row.
    t = load_trace(hta_trace("amd_trace"))
    assert t.steps["step"].tolist() == [1, 2]
    assert (t.gpu_annotations["name"] == "ProfilerStep#1").sum() == 1


def test_triton_cpu_op_with_stream_is_not_gpu_time():
    t = load_trace(hta_trace("triton_example"))
    assert t.gpu["name"].tolist() == ["triton_poi_fused_add_cos_sin_0"]
    assert t.gpu["dur"].sum() == pytest.approx(1.76)
    assert "triton_poi_fused_add_cos_sin_0" in set(t.cpu["name"])  # the Inductor cpu_op stays on the CPU side
    assert t.launches["cat"].tolist().count("cuda_driver") == 1


def test_cpu_only_trace_loads_without_gpu():
    t = load_trace(hta_trace("cpu_only"))
    assert not t.has_gpu and len(t.cpu) == 15 and t.steps["step"].tolist() == [551]


def test_old_category_spellings_and_fractional_ns(tmp_path):
    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.125, "dur": 5.5},
            {
                "ph": "X",
                "cat": "Runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 11.0,
                "dur": 1.0,
                "args": {"correlation": 5},
            },
            {
                "ph": "X",
                "cat": "Kernel",
                "name": "gemm",
                "pid": 0,
                "tid": 7,
                "ts": 20.001,
                "dur": 3.003,
                "args": {"correlation": 5, "device": 0, "stream": 7},
            },
            {
                "ph": "X",
                "cat": "Memcpy",
                "name": "Memcpy HtoD",
                "pid": 0,
                "tid": 7,
                "ts": 30.0,
                "dur": 1.0,
                "args": {"device": 0, "stream": 7},
            },
        ]
    }
    p = tmp_path / "old.json"
    p.write_text(json.dumps(doc))
    t = load_trace(p)
    assert t.gpu["kind"].tolist() == ["kernel", "memcpy"]
    assert t.gpu["ts"].iloc[0] == pytest.approx(20.001) and t.gpu["dur"].iloc[0] == pytest.approx(3.003)
    assert t.cpu["cat"].tolist() == ["cpu_op"] and t.launches["correlation"].tolist() == [5]


def test_flows_supply_missing_correlation(tmp_path):
    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 5.0, "dur": 1.0},
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 77, "pid": 1, "tid": 2, "ts": 5.0},
            {"ph": "f", "cat": "async_cpu_to_gpu", "name": "ac2g", "id": 77, "pid": 0, "tid": 7, "ts": 9.0, "bp": "e"},
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 9.0, "dur": 2.0},
        ]
    }
    p = tmp_path / "flows.json"
    p.write_text(json.dumps(doc))
    t = load_trace(p)
    assert t.gpu["correlation"].tolist() == [77] and t.launches["correlation"].tolist() == [77]


def test_ids_beyond_64_bits(tmp_path):
    big = 2**70 + 3
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 1,
                "dur": 1,
                "args": {"correlation": big, "External id": 2**65},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": 3,
                "dur": 2,
                "args": {"correlation": big, "device": 0, "stream": 7},
            },
        ]
    }
    p = tmp_path / "big.json"
    p.write_text(json.dumps(doc))
    t = load_trace(p)
    assert t.gpu["correlation"].tolist() == [big] and t.launches["external_id"].tolist() == [2**65]


@pytest.mark.parametrize(
    "content,problem",
    [
        (b"", "empty file"),
        (b'{"traceEvents": [', "invalid JSON"),
        (b"[1, 2, 3]", "not a Kineto trace"),
        (b'{"foo": 1}', "no 'traceEvents'"),
        (b'{"traceEvents": {"a": 1}}', "not a Kineto trace"),
        (gzip.compress(b'{"traceEvents": []}' * 50, mtime=0)[:30], "truncated or corrupt gzip"),
    ],
)
def test_bad_input_names_file_and_problem(tmp_path, content, problem):
    p = tmp_path / "bad.json.gz"
    p.write_bytes(content)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(p) in str(e.value) and problem in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_file_and_directory_of_ranks(tmp_path, builder):
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "nope.json")
    with pytest.raises(TraceError, match="holds no .json"):
        find_trace_files(tmp_path)
    builder.step(1, 0, 100)
    builder.write(tmp_path / "rank0.json")
    builder.write(tmp_path / "rank1.json.gz")
    (tmp_path / "notes.txt").write_text("x")
    assert [t.source.rsplit("/", 1)[1] for t in load_traces(tmp_path)] == ["rank0.json", "rank1.json.gz"]


# --- the three decode paths: the C scanner, msgspec typed structs, lenient structs event by event ------


def _tables(t):
    return {name: getattr(t, name) for name in ("gpu", "cpu", "launches", "gpu_annotations", "flows")}


def force_msgspec_path(monkeypatch):
    monkeypatch.setattr(scan, "SCANNER", None)


def force_lenient_path(monkeypatch):
    class Refuse:
        def decode(self, doc):
            raise msgspec.ValidationError("fast path disabled by the test")

    force_msgspec_path(monkeypatch)
    monkeypatch.setattr(trace_module, "EVENTS", Refuse())


@pytest.mark.parametrize(
    "where,name",
    [
        ("hta", "nccl_parser_config"),
        ("hta", "amd_trace"),
        ("hta", "triton_example"),
        ("hta", "cpu_only"),
        ("shipped", "dlrm.train.json.gz"),
        ("shipped", "llama-7b.infer.prefill.compile.json.gz"),
    ],
)
def test_the_three_decode_paths_build_the_same_tables(where, name, monkeypatch):
    path = hta_trace(name) if where == "hta" else SHIPPED_TRACES / name
    calls = {"msgspec": 0, "lenient": 0}
    fast_chunk, lenient_chunk = trace_module.fast_chunk, trace_module.lenient_chunk
    monkeypatch.setattr(
        trace_module,
        "fast_chunk",
        lambda events: calls.__setitem__("msgspec", calls["msgspec"] + 1) or fast_chunk(events),
    )
    monkeypatch.setattr(
        trace_module,
        "lenient_chunk",
        lambda raws: calls.__setitem__("lenient", calls["lenient"] + 1) or lenient_chunk(raws),
    )
    scanned = load_trace(path, use_cache=False)
    # Real Kineto traces take the scanner throughout; ROCm writes streams as hex text ("0x0"): the
    # scanner declines those chunks, msgspec's typed structs refuse them, the lenient path reads them.
    assert calls == ({"msgspec": 0, "lenient": 1} if name == "amd_trace" else {"msgspec": 0, "lenient": 0})
    force_msgspec_path(monkeypatch)
    fast = load_trace(path, use_cache=False)
    assert (calls["msgspec"] > 0) == (name != "amd_trace")  # ... then msgspec's structs, where they fit
    before = calls["lenient"]
    force_lenient_path(monkeypatch)
    lenient = load_trace(path, use_cache=False)
    assert calls["lenient"] > before  # ... and the lenient path
    for other in (fast, lenient):
        for table_name, table in _tables(scanned).items():
            pd.testing.assert_frame_equal(table, _tables(other)[table_name], check_categorical=True, obj=table_name)
    assert len(scanned.gpu) + len(scanned.cpu) > 0


def test_chunks_that_need_the_lenient_path_mix_with_fast_chunks(tmp_path, monkeypatch):
    # Chunk 1 decodes fast; chunk 2 has a string timestamp and a hex id (lenient path);
    # chunk 3 has an id beyond 64 bits (lenient path, Int128 -> object column).
    big = 2**66 + 1
    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 1.0,
            "dur": 1.0,
            "args": {"correlation": 10, "External id": 1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k1",
            "pid": 0,
            "tid": 7,
            "ts": 2.0,
            "dur": 1.0,
            "args": {"correlation": 10, "device": 0, "stream": 7},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": "3.5",
            "dur": 1.0,
            "args": {"correlation": "0x14", "External id": 2},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k2",
            "pid": 0,
            "tid": 7,
            "ts": 5.0,
            "dur": 2.0,
            "args": {"correlation": 20, "device": 0, "stream": 7},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 8.0,
            "dur": 1.0,
            "args": {"correlation": big, "External id": 3},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k3",
            "pid": 0,
            "tid": 7,
            "ts": 9.0,
            "dur": 4.0,
            "args": {"correlation": big, "device": 0, "stream": 7},
        },
    ]
    p = tmp_path / "mixed.json"
    text = json.dumps({"traceEvents": events}, indent=2)  # pretty-printed, like Kineto
    p.write_text(text)
    chunks = []
    decode = scan.decode_events
    monkeypatch.setattr(scan, "decode_events", lambda doc: chunks.append(bytes(doc)) or decode(doc))
    monkeypatch.setattr(document, "BLOCK", 300)  # a few events per chunk
    monkeypatch.setenv("HEADROOM_SCAN_AHEAD", "0")  # each chunk through decode_events (the spy)
    t = load_trace(p)
    assert len(chunks) >= 3
    assert t.launches["ts"].tolist() == [1.0, 3.5, 8.0]
    assert t.launches["correlation"].tolist() == [10, 20, big]
    assert t.gpu["correlation"].tolist() == [10, 20, big] and t.gpu["index"].tolist() == [1, 3, 5]
    assert t.gpu["dur"].tolist() == [1.0, 2.0, 4.0]


def test_ids_beyond_128_bits_are_refused_with_one_line(tmp_path):
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": 1,
                "dur": 1,
                "args": {"correlation": 2**130},
            }
        ]
    }
    p = tmp_path / "huge.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=r"huge.json: an id does not fit in 128 bits"):
        load_trace(p)


def test_a_gpu_activity_that_cannot_be_read_names_the_file_event_and_field(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {"ph": "X", "cat": "cpu_op", "name": "op", "ts": 1, "dur": 1},
                    {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": 5},
                ]
            }
        )
    )
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == (f"{p}: event 1: args: expected `object | null`, got `int` (--lenient drops such events)")


def test_events_that_cannot_be_read_are_counted_not_dropped_silently(tmp_path):
    p = tmp_path / "odd.json"
    events = [
        5,
        {"cat": "cpu_op", "name": "no ph", "ts": 1, "dur": 1},
        {"ph": "X", "cat": 7, "name": "x"},
        {"ph": "X", "cat": "cpu_op", "name": "fine", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    ]
    p.write_text(json.dumps({"traceEvents": events}))
    t = load_trace(p)
    assert t.cpu["name"].tolist() == ["fine"]
    assert t.warnings == [
        "3 events could not be read and were skipped (first: event 0: the event: expected `object`, got `int`)"
    ]


def _stream_wait_trace(builder, path):
    """P on stream 7; C on stream 8 waits for P through cudaEventRecord + cudaStreamWaitEvent."""
    b = builder
    b.step(1, 0.0, 100.0)
    b.kernel("P", 10.0, 20.0, 100.0, stream=7)
    b.runtime("cudaEventRecord", 15.0, corr=5000)
    b.runtime("cudaStreamWaitEvent", 17.0, corr=5001)
    b.sync("Stream Wait Event", 18.0, stream=8, corr=5001, wait_on_stream=7, record_corr=5000)
    b.kernel("C", 19.0, 121.0, 50.0, stream=8)
    b.sync("Event Sync", 95.0, stream=-1, corr=5002, wait_on_stream=8, record_corr=5003, dur=76.0)
    return b.write(path)


def test_loader_keeps_cuda_sync_records(builder, tmp_path):
    t = load_trace(_stream_wait_trace(builder, tmp_path / "sync.json"))
    s = t.syncs
    assert s["name"].tolist() == ["Stream Wait Event", "Event Sync"]
    assert s["stream"].tolist() == [8, -1] and s["device"].tolist() == [0, 0]
    assert s["wait_on_stream"].tolist() == [7, 8]
    assert s["wait_on_cuda_event_record_corr_id"].tolist() == [5000, 5003]
    assert s["correlation"].tolist() == [5001, 5002] and s["dur"].tolist() == [0.0, 76.0]
    assert len(t.gpu) == 2 and len(t.launches) == 4  # the syncs are not GPU activity


def test_lenient_path_keeps_the_same_sync_records(builder, tmp_path, monkeypatch):
    path = _stream_wait_trace(builder, tmp_path / "sync.json")
    fast = load_trace(path).syncs
    force_lenient_path(monkeypatch)
    pd.testing.assert_frame_equal(load_trace(path).syncs, fast)


def test_traces_without_sync_records_have_an_empty_table():
    # The compiled Llama trace is the one shipped capture made without the profiler's CUDA sync events.
    t = load_trace(SHIPPED_TRACES / "llama-7b.infer.prefill.compile.json.gz")
    assert len(t.syncs) == 0 and {"wait_on_stream", "wait_on_cuda_event_record_corr_id"} <= set(t.syncs.columns)


@pytest.mark.parametrize("exact", [False, True])
def test_fwdbwd_pairs_sequence_numbers_and_module_range_inputs(tmp_path, exact):
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "headroom/module model.lin (Linear)",
                "pid": 1,
                "tid": 1,
                "ts": 1.0,
                "dur": 9.0,
                "args": {
                    "External id": 1,
                    "Input Dims": [[4, 8], [], [[2], [3]]],
                    "Input type": ["c10::BFloat16", "Scalar", "TensorList"],
                },
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": 2.0,
                "dur": 1.0,
                "args": {
                    "External id": 2,
                    "Sequence number": 7,
                    "Fwd thread id": 0,
                    "Input Dims": [[4, 8], [8, 8]],
                    "Input type": ["float", "float"],
                },
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "MmBackward0",
                "pid": 1,
                "tid": 2,
                "ts": 20.0,
                "dur": 3.0,
                "args": {"External id": 3, "Sequence number": 7, "Fwd thread id": 1},
            },
            {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 9, "pid": 1, "tid": 1, "ts": 2.0},
            {"ph": "f", "cat": "fwdbwd", "name": "fwdbwd", "id": 9, "pid": 1, "tid": 2, "ts": 20.0, "bp": "e"},
            {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 10, "pid": 1, "tid": 1, "ts": 5.0},  # no finish
        ]
    }
    if exact:  # a timestamp written as text sends the chunk down msgspec's exact path
        doc["traceEvents"][1]["dur"] = "1.0"
    p = tmp_path / "f.json"
    p.write_text(json.dumps(doc))
    t = load_trace(p)
    assert t.flows.to_dict("records") == [
        {"id": 9, "start_pid": "1", "start_tid": "1", "start_ts": 2.0, "end_pid": "1", "end_tid": "2", "end_ts": 20.0}
    ]
    cpu = t.cpu.set_index("name")
    assert cpu.loc["aten::mm", ["sequence", "fwd_thread"]].tolist() == [7, 0]
    assert cpu.loc["MmBackward0", ["sequence", "fwd_thread"]].tolist() == [7, 1]
    assert cpu.loc["headroom/module model.lin (Linear)", "sequence"] == -1
    # Shapes are kept for module ranges only, tensors only (no scalars, no tensor lists).
    assert cpu.loc["headroom/module model.lin (Linear)", "inputs"] == "bf16[4,8]"
    assert cpu.loc["aten::mm", "inputs"] == ""
