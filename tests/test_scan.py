"""The C scanner (headroom/trace/_scan.c): the chunks it accepts decode into the same tables as msgspec's typed
structs; everything outside Kineto's own types it declines (None), so msgspec decides and words the error."""

import json
import math
import os
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import headroom.trace.document as document
import headroom.trace.kineto as kineto
import headroom.trace.scan as scan
import headroom.trace.schema as schema
from tests.conftest import SHIPPED_TRACES

_scan = scan.EXTENSION
REPO = Path(__file__).resolve().parents[1]


def test_the_scanner_is_built():
    # `pip install -e .` (make setup) compiles it; without it every chunk takes the msgspec path.
    assert _scan is not None and scan.SCANNER is not None


def _both(doc: bytes):
    """(the scanner's chunk or None when it declined, the loader's chunk, the msgspec path's chunk)."""
    accepted = _scan.Scanner().scan(doc) is not None
    scanned = scan.decode_events(doc)
    return (scanned if accepted else None), scanned, kineto.decode_events(doc)


def _assert_same_chunk(a, b):
    assert (a.events, dict(a.unreadable), a.first_unreadable, a.gpu_unreadable, a.cut_error, a.json_error, a.error) == (
        b.events,
        dict(b.unreadable),
        b.first_unreadable,
        b.gpu_unreadable,
        b.cut_error,
        b.json_error,
        b.error,
    )
    assert set(a.tables) == set(b.tables)
    for t in a.tables:
        assert a.tables[t].schema == b.tables[t].schema, t
        assert_frame_equal(a.tables[t], b.tables[t], categorical_as_str=True)


def _columns(doc: bytes) -> dict:
    found = _scan.Scanner().scan(doc)
    assert found is not None
    n, cols = found
    return {k: np.frombuffer(v, dtype=scan.TYPES.get(k, np.int64)) for k, v in cols.items()}


# --- numbers: the same double as Python's float() of the text ---------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "5126186325241.388",
        "1790857026000000000",
        "0",
        "-0",
        "-0.0",
        "0.1",
        "0.30000000000000004",
        "1e22",
        "1e23",
        "9007199254740993",
        "9007199254740993.0",
        "123456789012345678",
        "1.7976931348623157e308",
        "4.9e-324",
        "2.2250738585072011e-308",
        "2.2250738585072014e-308",
        "1E5",
        "1e+5",
        "1.5e-7",
        "0.000000000000000000001",
        "123456789.123456789123456789",
        "9223372036854775807",
        "-9223372036854775808",
        "100000000000000000000e-2",
        "0.00000000000000000000000000000000000000000000000000000000001",
        "3.14159265358979323846264338327950288",
    ],
)
def test_numbers_are_the_nearest_double_to_their_text(text):
    cols = _columns(f'[{{"ph": "X", "cat": "kernel", "ts": {text}, "dur": {text}}}]'.encode())
    expected = float(int(text)) if text.lstrip("-").isdigit() else float(text)
    assert struct.pack("<d", cols["ts"][0]) == struct.pack("<d", expected)  # bit for bit (-0.0 too)


@settings(max_examples=400)
@given(
    digits=st.text("0123456789", min_size=17, max_size=40),
    point=st.integers(0, 40),
    exponent=st.one_of(st.none(), st.integers(-340, 330)),
    negative=st.booleans(),
)
def test_long_decimals_are_the_nearest_double_to_their_text(digits, point, exponent, negative):
    """Beyond 2^53 or 10^22 the scanner takes the C library's conversion (no call into Python: the scan runs
    without the GIL); a timestamp in microseconds of the epoch with three decimals is 19 digits."""
    digits = digits.lstrip("0") or "0"
    whole, fraction = digits[: max(point, 1)], digits[max(point, 1) :]
    body = f"{whole}.{fraction}" if fraction else whole
    text = ("-" if negative else "") + body + (f"e{exponent}" if exponent is not None else "")
    expected = float(int(text)) if text.lstrip("-").isdigit() else float(text)
    found = _scan.Scanner().scan(f'[{{"ph": "X", "cat": "kernel", "ts": {text}}}]'.encode())
    if not math.isfinite(expected) or (text.lstrip("-").isdigit() and abs(int(text)) >= 2**63):
        assert found is None  # beyond a double or int64: the msgspec path decides
        return
    assert found is not None
    ts = np.frombuffer(found[1]["ts"], dtype=np.float64)[0]
    assert struct.pack("<d", ts) == struct.pack("<d", expected)


@pytest.mark.parametrize(
    "value,expected",
    [
        ("0", 0),
        ("-1", -1),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("null", None),
    ],
)
def test_ids_are_64_bit_integers_or_absent(value, expected):
    cols = _columns(f'[{{"ph": "X", "cat": "kernel", "args": {{"correlation": {value}}}}}]'.encode())
    present = bool(cols["present"][0] & (1 << scan.PRESENT_BIT["correlation"]))
    assert (int(cols["correlation"][0]) if present else None) == expected


@pytest.mark.parametrize(
    "event",
    [
        '{"ph": "X", "args": {"correlation": 9223372036854775808}}',  # beyond int64: msgspec makes it Int128
        '{"ph": "X", "args": {"correlation": 1.0}}',  # a float where msgspec wants an int
        '{"ph": "X", "args": {"correlation": true}}',
        '{"ph": "X", "ts": "12.5"}',  # text where a number belongs: lenient path
        '{"ph": "X", "ts": 1e400}',  # out of range
        '{"ph": "X", "ts": 123456789012345678901234567890}',  # an integer beyond 64 bits as a float
        '{"ph": "X", "name": null}',
        '{"ph": "X", "name": 5}',
        '{"ph": 1}',
        '{"ph": "X", "args": null}',
        '{"ph": "X", "args": [1]}',
        '{"ph": "X", "pid": null}',
        '{"ph": "X", "pid": 1.5}',
        '{"ph": "X", "n\\u0061me": "k"}',  # an escaped key
        '{"ph": "X", "name": "\\ud800"}',  # a lone surrogate
        '{"ph": "X", "name": "\\udc00\\ud800"}',
        '{"ph": "X", "name": "a\tb"}',  # a control character in a string
        '{"ph": "X", "name": "\\x"}',  # no such escape
        '{"ph": "X", "name": "\\u12"}',
        '{"ph": "X",}',
        '{"ph": "X" "cat": "k"}',
        '{"ph": "X"',
        "5",
        '"x"',
        "null",
        "[]",
        '{"ph": "X", "x": 01}',
        '{"ph": "X", "x": 1.}',
        '{"ph": "X", "x": .5}',
        '{"ph": "X", "x": +1}',
        '{"ph": "X", "x": -}',
        '{"ph": "X", "x": 1e}',
        '{"ph": "X", "x": tru}',
        '{"ph": "X", "x": NaN}',
        '{"ph": "X", "x": ' + "[" * 70 + "]" * 70 + "}",  # deeper than the scanner goes
    ],
)
def test_what_is_not_kinetos_own_is_declined_and_decoded_the_same(event):
    doc = f"[{event}]".encode()
    assert _scan.Scanner().scan(doc) is None
    _, scanned, reference = _both(doc)
    _assert_same_chunk(scanned, reference)


@pytest.mark.parametrize(
    "doc",
    [
        b'[{"ph": "X"}] x',
        b'[{"ph": "X"},]',
        b'[{"ph": "X"}',
        b"",
        b'{"ph": "X"}',
        b'[{"ph": "X", "name": "\xff"}]',
        b'[{"ph": "X", "name": "\xc0\x80"}]',
        b'[{"ph": "X", "name": "\xed\xa0\x80"}]',
        b'[{"ph": "X", "name": "\xf4\x90\x80\x80"}]',
        # in strings the scanner skips: a field nobody reads, an args value, a key
        b'[{"ph": "X", "stack": ["\xff"]}]',
        b'[{"ph": "X", "args": {"x": "a\xe2\x82"}}]',
        b'[{"ph": "X", "\xc3": 1}]',
        b'[{"ph": "X", "args": {"Input type": ["\xf8"]}}]',
    ],
)
def test_invalid_json_and_utf8_are_declined(doc):
    assert _scan.Scanner().scan(doc) is None
    _, scanned, reference = _both(doc)
    _assert_same_chunk(scanned, reference)


def test_escapes_and_unicode_decode_as_json_does():
    names = ["caf\u00e9", "\U0001f600 grin", 'quote " and \\ slash', "tab\tnew\nline", "ctl\u0001", "/"]
    events = [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": 1.0, "dur": 1.0} for n in names]
    for ascii_only in (True, False):
        doc = json.dumps(events, ensure_ascii=ascii_only).replace("/", "\\/").encode()
        accepted, scanned, reference = _both(doc)
        assert accepted is not None
        assert scanned.tables["gpu"]["name"].to_list() == names
        _assert_same_chunk(scanned, reference)


def test_the_last_of_a_key_given_twice_counts_and_a_later_args_replaces_the_earlier_whole():
    doc = (
        b'[{"ph": "X", "cat": "kernel", "name": "a", "name": "b", "ts": 1, "ts": 2.5, "dur": 1, "pid": 3, '
        b'"tid": 4, "args": {"correlation": 7, "device": 1}, "args": {"stream": 9}}]'
    )
    accepted, scanned, reference = _both(doc)
    assert accepted is not None
    gpu = scanned.tables["gpu"]
    assert gpu["name"].to_list() == ["b"] and gpu["ts"].to_list() == [2.5]
    assert gpu["correlation"].to_list() == [None] and gpu["device"].to_list() == [None]
    assert gpu["stream"].to_list() == [9]
    _assert_same_chunk(scanned, reference)


def test_names_and_pairs_are_interned_across_chunks():
    s = _scan.Scanner()
    one = b'[{"ph": "X", "cat": "kernel", "name": "gemm"}, {"ph": "X", "cat": "cpu_op", "name": "aten::mm"}]'
    two = b'[{"ph": "X", "cat": "cpu_op", "name": "aten::mm"}, {"ph": "X", "cat": "kernel", "name": "gemm"}]'
    n1, c1 = s.scan(one)
    n2, c2 = s.scan(two)
    assert s.names == ["gemm", "aten::mm"] and s.pairs == [("X", "kernel"), ("X", "cpu_op")]
    assert np.frombuffer(c1["name"], np.int32).tolist() == [0, 1]
    assert np.frombuffer(c2["name"], np.int32).tolist() == [1, 0]
    assert np.frombuffer(c2["pair"], np.int32).tolist() == [1, 0]


def test_a_scanner_that_met_too_many_names_is_replaced_and_the_tables_stay_the_same(monkeypatch):
    from headroom.trace.load import load_trace

    path = SHIPPED_TRACES / "bert-base.infer.json.gz"
    monkeypatch.setattr(document, "BLOCK", 1 << 16)  # many chunks
    before = load_trace(path, use_cache=False)
    first = scan.SCANNER
    monkeypatch.setattr(scan, "NAMES_MAX", 3)  # a fresh scanner for nearly every chunk
    after = load_trace(path, use_cache=False)
    assert scan.SCANNER is not first and scan.CODES.scanner is scan.SCANNER
    for t in ("gpu", "cpu", "launches", "gpu_annotations", "syncs", "flows"):
        pd.testing.assert_frame_equal(getattr(before, t), getattr(after, t), obj=t)


def test_text_pids_among_numbers_make_the_column_text_as_msgspecs_path_does():
    doc = (
        b'[{"ph": "X", "cat": "cpu_op", "name": "a", "pid": "Spans", "tid": 2, "ts": 1, "dur": 1},'
        b' {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 5, "tid": "PyTorch Profiler", "ts": 2, "dur": 1},'
        b' {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2, "dur": 1}]'
    )
    accepted, scanned, reference = _both(doc)
    assert accepted is not None
    assert scanned.tables["cpu"]["pid"].to_list() == ["Spans", "5"]
    assert scanned.tables["cpu"]["tid"].to_list() == ["2", "PyTorch Profiler"]
    assert scanned.tables["gpu"]["pid"].to_list() == [0]  # numbers stay numbers in a table of numbers
    _assert_same_chunk(scanned, reference)


def test_module_events_and_ranges_keep_what_the_analyses_read():
    module = {"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_0", "pid": 1, "tid": 1, "ts": 1, "dur": 9}
    plain = {
        "ph": "X",
        "cat": "python_function",
        "name": "torch/nn/modules/module.py(1): _call_impl",
        "pid": 1,
        "tid": 1,
        "ts": 1,
        "dur": 9,
    }
    ranged = {
        "ph": "X",
        "cat": "user_annotation",
        "name": "headroom/module model.fc (Linear)",
        "pid": 1,
        "tid": 1,
        "ts": 2,
        "dur": 5,
        "args": {"Input Dims": [[4, 2048], [], [7]], "Input type": ["c10::BFloat16", "Scalar"]},
    }
    doc = json.dumps([module, plain, ranged]).encode()
    accepted, scanned, reference = _both(doc)
    assert accepted is not None
    cpu = scanned.tables["cpu"]
    assert cpu["name"].to_list() == [module["name"], ranged["name"]]  # the plain python_function is dropped
    assert cpu["inputs"].to_list() == ["", "bf16[4,2048]"]
    assert cpu["index"].to_list() == [0, 2]
    _assert_same_chunk(scanned, reference)


def test_events_without_ph_are_counted_as_the_msgspec_path_counts_them():
    doc = b'[{"cat": "kernel", "name": "k", "ts": 1, "dur": 1}, {"cat": "cpu_op", "name": "x"}, {"ph": "X"}]'
    accepted, scanned, reference = _both(doc)
    assert accepted is not None
    assert scanned.gpu_unreadable == [(0, "no 'ph' (event type)")] and dict(scanned.unreadable) == {
        "no 'ph' (event type)": 1
    }
    _assert_same_chunk(scanned, reference)


# --- generated chunks: Kineto's own types (accepted) and anything else (declined), the same tables -------

WS = st.sampled_from(["", " ", "  ", "\n    ", "\t", "\r\n"])
CATEGORIES = [
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
    "cuda_sync",
    "ac2g",
    "fwdbwd",
    "overhead",
    "Trace",
    "",
]
NAMES = st.one_of(
    st.sampled_from(
        [
            "aten::mm",
            "nn.Module: Linear",
            "headroom/module m.fc (Linear)",
            "ProfilerStep#3",
            "cudaLaunchKernel",
            'a}, {"ph"',
            "",
            "x\\y",
            "Stream Wait Event",
        ]
    ),
    st.text(max_size=12),
)


def _float_text(draw) -> str:
    x = draw(st.floats(allow_nan=False, allow_infinity=False, width=64))
    form = draw(st.sampled_from(["repr", "e", "E", "g17", "fixed"]))
    if form == "repr":
        return repr(x)
    if form == "e":
        return f"{x:e}"
    if form == "E":
        return f"{x:.20E}"
    if form == "g17":
        text = f"{x:.17g}"
        return text if any(c in text for c in ".eEn") else text + ".0"
    return f"{x:.6f}" if abs(x) < 1e30 else repr(x)


@st.composite
def number_text(draw) -> str:
    kind = draw(st.sampled_from(["int", "float", "timestamp"]))
    if kind == "int":
        return str(draw(st.integers(-(2**63), 2**63 - 1)))
    if kind == "timestamp":  # Kineto's: microseconds with three decimals
        return f"{draw(st.integers(0, 2**52)) / 1000:.3f}"
    return _float_text(draw)


@st.composite
def json_value(draw, depth=0) -> str:
    """Any JSON value as text (an unknown field's)."""
    choices = ["number", "string", "literal"] + (["array", "object"] if depth < 3 else [])
    kind = draw(st.sampled_from(choices))
    if kind == "number":
        return draw(number_text())
    if kind == "string":
        return json.dumps(draw(st.text(max_size=6)), ensure_ascii=draw(st.booleans()))
    if kind == "literal":
        return draw(st.sampled_from(["true", "false", "null"]))
    items = draw(st.lists(json_value(depth + 1), max_size=3))
    ws = draw(WS)
    if kind == "array":
        return "[" + f",{ws}".join(items) + "]"
    keys = draw(st.lists(st.text(max_size=5), min_size=len(items), max_size=len(items)))
    return "{" + f",{ws}".join(f"{json.dumps(k)}:{ws}{v}" for k, v in zip(keys, items)) + "}"


def _int_or_null(draw, wild: bool) -> str:
    if wild and draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(["9223372036854775808", "1.5", "true", '"7"', "[]", "1e3", "-9223372036854775809"]))
    return "null" if draw(st.integers(0, 6)) == 0 else str(draw(st.integers(-(2**63), 2**63 - 1)))


@st.composite
def event_text(draw, wild: bool) -> str:
    fields = []
    if draw(st.integers(0, 9)):
        fields.append(("ph", json.dumps(draw(st.sampled_from(["X", "X", "X", "s", "f", "t", "i", "M", ""])))))
    if draw(st.integers(0, 9)):
        fields.append(("cat", json.dumps(draw(st.sampled_from(CATEGORIES)))))
    if draw(st.integers(0, 9)):
        fields.append(("name", json.dumps(draw(NAMES), ensure_ascii=draw(st.booleans()))))
    for key in ("pid", "tid"):
        if draw(st.integers(0, 9)):
            fields.append(
                (
                    key,
                    json.dumps(draw(st.sampled_from(["Spans", "PyTorch Profiler"])))
                    if draw(st.integers(0, 5)) == 0
                    else str(draw(st.integers(-(2**63), 2**63 - 1))),
                )
            )
    for key in ("ts", "dur"):
        if draw(st.integers(0, 9)):
            fields.append((key, "null" if draw(st.integers(0, 8)) == 0 else draw(number_text())))
    if draw(st.booleans()):
        fields.append(("id", _int_or_null(draw, wild)))
    if draw(st.integers(0, 4)):
        args = [
            (k, _int_or_null(draw, wild))
            for k in draw(
                st.sets(
                    st.sampled_from(
                        [
                            "External id",
                            "correlation",
                            "Sequence number",
                            "Fwd thread id",
                            "device",
                            "stream",
                            "wait_on_stream",
                            "wait_on_cuda_event_record_corr_id",
                        ]
                    )
                )
            )
        ]
        if draw(st.booleans()):
            args.append(("bytes", "null" if draw(st.integers(0, 5)) == 0 else draw(number_text())))
        if draw(st.booleans()):
            args.append(("Input Dims", draw(st.sampled_from(["[[4, 2048], []]", "[]", "null", "[[1,2],[3]]"]))))
            args.append(("Input type", draw(st.sampled_from(['["float", "Scalar"]', '["c10::BFloat16"]', "5"]))))
        for _ in range(draw(st.integers(0, 2))):
            args.append(
                (draw(st.sampled_from(["Concrete Inputs", "Ev Idx", "Record function id", "x"])), draw(json_value()))
            )
        ws = draw(WS)
        fields.append(
            ("args", "{" + f",{ws}".join(f"{json.dumps(k)}:{ws}{v}" for k, v in draw(st.permutations(args))) + "}")
        )
    for _ in range(draw(st.integers(0, 2))):  # fields headroom does not read
        fields.append((draw(st.sampled_from(["bp", "s", "Occupancy", "ts_extra"])), draw(json_value())))
    if fields and draw(st.integers(0, 4)) == 0:  # a key given twice: the last counts
        fields.append(draw(st.sampled_from(fields)))
    if wild and draw(st.integers(0, 3)) == 0:
        fields.append(
            draw(
                st.sampled_from(
                    [
                        ("ts", '"12"'),
                        ("name", "7"),
                        ("args", "null"),
                        ("pid", "null"),
                        ("cat", "[]"),
                        ("ts", "1e999"),
                        ("name", '"\\ud83d"'),
                    ]
                )
            )
        )
    ws = draw(WS)
    return "{" + ws + f",{ws}".join(f"{json.dumps(k)}{draw(WS)}:{draw(WS)}{v}" for k, v in fields) + ws + "}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(event_text(wild=False), max_size=12), ws=WS)
def test_generated_kineto_chunks_are_accepted_and_give_the_msgspec_paths_tables(events, ws):
    doc = ("[" + ws + f",{ws}".join(events) + ws + "]").encode()
    accepted, scanned, reference = _both(doc)
    assert accepted is not None
    _assert_same_chunk(scanned, reference)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(event_text(wild=True), max_size=12), cut=st.integers(0, 40), garble=st.booleans())
def test_generated_chunks_with_anything_decode_the_same_either_way(events, cut, garble):
    doc = ("[" + ",\n  ".join(events) + "]").encode()
    if garble and doc:  # a chunk cut short or with a stray byte: invalid JSON either way
        doc = doc[: max(len(doc) - cut, 0)] if cut % 2 else doc[:cut] + b"\x80" + doc[cut:]
    _, scanned, reference = _both(doc)
    _assert_same_chunk(scanned, reference)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_the_scanner(data):
    for doc in (data, b"[" + data + b"]", b'[{"ph": "X", "name": "' + data + b'"}]'):
        found = _scan.Scanner().scan(doc)
        if found is not None:  # accepted: then it is valid JSON that msgspec reads the same
            _, scanned, reference = _both(doc)
            _assert_same_chunk(scanned, reference)
        else:
            assert found is None


def test_real_traces_decode_chunk_for_chunk_as_msgspecs_structs_do():
    names = ("resnet-50.train.json.gz", "llama-7b.infer.prefill.json.gz", "dlrm.train.json.gz")
    for name in names:
        for item in document.split(SHIPPED_TRACES / name):
            if isinstance(item, document.Document):
                break
            doc = bytes(item[0])
            accepted, scanned, reference = _both(doc)
            assert accepted is not None, name
            _assert_same_chunk(scanned, reference)


# --- the key table: generated from the schema ---------------------------------------------------------


def test_the_key_table_in_the_tree_is_the_one_the_schema_makes():
    # scripts/gen_scan_keys.py writes it at build time; the header in the tree must be its output, byte for byte
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_scan_keys", REPO / "scripts" / "gen_scan_keys.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = gen.header(gen.tomllib.loads(gen.DATA.read_text()))
    assert (REPO / "headroom" / "trace" / "_scan_keys.h").read_bytes() == text.encode()
    # and the compiled scanner reads the schema's fields: every loaded event and args field of a scanner kind
    loaded = {f.column for f in schema.FIELDS if f.place != schema.DERIVED and not f.on_demand}
    assert set(_scan.INT_COLUMNS) == {c for c in loaded if schema.BY_COLUMN[c].type in ("id", "small_id")}
    assert set(_scan.DOUBLE_COLUMNS) == {c for c in loaded if schema.BY_COLUMN[c].type in ("time", "number")}
    assert set(_scan.RAW_COLUMNS) == {"dims", "types"} and _scan.THREAD_COLUMNS == ("pid", "tid")


def test_a_field_added_to_the_schema_is_one_row_for_the_scanner_too():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_scan_keys", REPO / "scripts" / "gen_scan_keys.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    data = gen.tomllib.loads(gen.DATA.read_text())
    data["field"].append({"column": "queued", "key": "queued", "place": "args", "type": "id", "tables": ["gpu"]})
    text = gen.header(data)
    assert "INT_WAIT_ON_CUDA_EVENT_RECORD_CORR_ID, INT_QUEUED, ARG_INTS, INT_ID = ARG_INTS, N_INTS" in text
    assert 'if (memcmp(k, "queued", 6) == 0) return SLOT(KIND_INT, INT_QUEUED);' in text


# --- the scanner under AddressSanitizer and UndefinedBehaviorSanitizer -----------------------------------


@pytest.mark.slow  # a build of the scanner under the sanitizers
def test_the_scanner_compiled_with_sanitizers_passes_the_generated_chunks_and_real_traces(tmp_path):
    """_scan.c built with -fsanitize=address,undefined (any finding aborts), loaded in place of the scanner in
    a fresh process that scans this file's generated chunks (Kineto's types, anything, arbitrary bytes; some
    compared with the msgspec path's tables) and every chunk of three real traces."""
    import shutil
    import subprocess
    import sys
    import sysconfig

    gcc = shutil.which("gcc")
    asan = (
        subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
        if gcc
        else ""
    )
    if not gcc or not Path(asan).is_file():
        pytest.skip("needs gcc and its AddressSanitizer runtime")
    built = tmp_path / ("_scan" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(
        [
            gcc,
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-shared",
            "-fPIC",
            f"-I{sysconfig.get_paths()['include']}",
            str(REPO / "headroom" / "trace" / "_scan.c"),
            "-o",
            str(built),
        ],
        check=True,
    )
    script = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("headroom.trace._scan", {str(built)!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sys.modules["headroom.trace._scan"] = module
from hypothesis import given, settings, strategies as st
import headroom.trace.document as document
import headroom.trace.scan as scan
import tests.test_scan as t
assert scan.EXTENSION is module
quick = settings(max_examples=120, deadline=None, database=None)

@quick
@given(events=st.lists(t.event_text(wild=False), max_size=12), ws=t.WS)
def kineto(events, ws):      # accepted, and (for some) the msgspec path's tables
    doc = ("[" + ws + f",{{ws}}".join(events) + ws + "]").encode()
    assert module.Scanner().scan(doc) is not None
    if len(events) % 4 == 0:
        t.test_generated_kineto_chunks_are_accepted_and_give_the_msgspec_paths_tables.hypothesis.inner_test(events, ws)

@quick
@given(events=st.lists(t.event_text(wild=True), max_size=12), cut=st.integers(0, 40), garble=st.booleans())
def wild(events, cut, garble):
    t.test_generated_chunks_with_anything_decode_the_same_either_way.hypothesis.inner_test(events, cut, garble)

@quick
@given(data=st.binary(max_size=200))
def arbitrary(data):
    for doc in (data, b"[" + data + b"]", b'[{{"ph": "X", "name": "' + data + b'"}}]'):
        module.Scanner().scan(doc)

kineto(); wild(); arbitrary()
scanner, chunks = module.Scanner(), 0
for name in ("resnet-50.train.json.gz", "llama-7b.infer.prefill.json.gz", "dlrm.train.json.gz"):
    for item in document.split(t.SHIPPED_TRACES / name):
        if isinstance(item, document.Document):
            break
        assert scanner.scan(bytes(item[0])) is not None, name
        chunks += 1
print("SCANNED", chunks, "real chunks with", scan.EXTENSION.__file__)
"""
    env = dict(
        os.environ,
        LD_PRELOAD=asan,
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"real chunks with {built}" in run.stdout
