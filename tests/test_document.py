"""document.blocks: a file's text in blocks, gzip inflated ahead by a thread (document.read_ahead)."""

from __future__ import annotations

import gzip
import threading
import time
import zlib

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import headroom.trace.document as document
from headroom.trace.kineto import TraceError

GZIP_MAGIC = b"\x1f\x8b"


def _gunzip_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "headroom-gunzip"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=4),
    size=st.integers(min_value=1, max_value=700),
    gz=st.booleans(),
)
def test_blocks_give_the_text_whole_plain_or_gzip_of_several_members(tmp_path, parts, size, gz):
    # A file is gzip by its first two bytes (a JSON trace never starts with them); plain bytes that do are
    # a gzip stream to the reader, and corrupt.
    assume(gz or not b"".join(parts).startswith(GZIP_MAGIC))
    path = tmp_path / "t.json"
    path.write_bytes(b"".join(gzip.compress(p) for p in parts) if gz else b"".join(parts))
    got = list(document.blocks(path, size))
    assert b"".join(got) == b"".join(parts)
    assert all(len(b) <= size for b in got) if gz else True
    assert not _gunzip_threads()


def test_gzip_blocks_are_inflated_by_the_read_ahead_thread(tmp_path, monkeypatch):
    path = tmp_path / "t.json.gz"
    text = bytes(range(256)) * 4096  # 1 MB
    path.write_bytes(gzip.compress(text))
    where = []
    gunzipped = document.gunzipped

    def spy(*args):
        for block in gunzipped(*args):
            where.append(threading.current_thread().name)
            yield block

    monkeypatch.setattr(document, "gunzipped", spy)
    got = list(document.blocks(path, 1 << 16))
    assert b"".join(got) == text and len(got) == 16
    assert set(where) == {"headroom-gunzip"} and len(where) == 16


def test_the_read_ahead_runs_ahead_by_its_depth_and_no_further():
    produced = []

    def items():
        for i in range(10):
            produced.append(i)
            yield bytes([i])

    it = document.read_ahead(items(), depth=2)
    assert next(it) == b"\x00"
    deadline = time.monotonic() + 5
    while len(produced) < 4 and time.monotonic() < deadline:  # 1 taken, 2 queued, 1 waiting to be put
        time.sleep(0.01)
    time.sleep(0.1)
    assert len(produced) == 4
    assert list(it) == [bytes([i]) for i in range(1, 10)]


def test_a_corrupt_gzip_is_named_after_the_blocks_before_the_damage(tmp_path):
    text = b"".join(b'{"ph": "X", "name": "k%d"}, ' % i for i in range(200_000))
    raw = bytearray(gzip.compress(text, compresslevel=1))
    raw[len(raw) // 2 : len(raw) // 2 + 64] = b"\xff" * 64
    path = tmp_path / "bad.json.gz"
    path.write_bytes(bytes(raw))
    got = []
    with pytest.raises(TraceError, match=r"bad\.json\.gz: truncated or corrupt gzip"):
        for block in document.blocks(path, 1 << 16):
            got.append(block)
    # Blocks before the damage come first (deflate may inflate some garbage before it finds the damage).
    assert got and got[0] == text[: len(got[0])]
    assert not _gunzip_threads()


def test_a_truncated_gzip_is_named(tmp_path):
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": []}' * 10_000)[:-20])
    with pytest.raises(TraceError, match=r"cut\.json\.gz: truncated or corrupt gzip \(compressed file ended"):
        list(document.blocks(path, 1 << 12))
    assert not _gunzip_threads()


def test_a_reader_that_stops_early_stops_the_thread_and_closes_the_file(tmp_path, monkeypatch):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(bytes(range(256)) * 40_000))
    opened = []
    real_open = document.open_binary
    monkeypatch.setattr(document, "open_binary", lambda p: opened.append(real_open(p)) or opened[-1])
    it = document.blocks(path, 1 << 12)
    next(it)
    assert len(_gunzip_threads()) == 1
    it.close()
    assert not _gunzip_threads() and opened[0].closed


def test_an_error_of_the_producer_is_raised_where_its_item_would_be():
    def items():
        yield b"a"
        raise zlib.error("Error -3 while decompressing data: invalid distance too far back")

    it = document.read_ahead(items())
    assert next(it) == b"a"
    with pytest.raises(zlib.error, match="invalid distance"):
        next(it)
    assert not _gunzip_threads()
