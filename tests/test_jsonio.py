"""The one JSON writer: valid JSON (NaN -> null), numpy values as numbers, atomic files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from headroom.jsonio import atomic_file, dumps, write_json


def test_non_finite_numbers_become_null_and_numpy_values_numbers():
    text = dumps({"a": math.nan, "b": [1.5, math.inf, np.float64("nan")], "c": np.int64(7), "d": np.float32(0.5),
                  "e": np.array([1.0, np.nan])})
    assert json.loads(text) == {"a": None, "b": [1.5, None, None], "c": 7, "d": 0.5, "e": [1.0, None]}
    assert "NaN" not in text and "Infinity" not in text


def test_write_json_is_atomic(tmp_path):
    path = write_json(tmp_path / "out" / "doc.json", {"x": math.nan})
    assert json.loads(path.read_text()) == {"x": None} and path.read_text().endswith("\n")

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with atomic_file(path) as f:
            f.write(b'{"half": ')
            raise Boom
    assert json.loads(path.read_text()) == {"x": None}            # the old file is intact
    assert sorted(p.name for p in path.parent.iterdir()) == ["doc.json"]   # no temporary left behind


def test_plain_is_the_one_encoder_of_result_dataclasses():
    """A dataclass as an object of its fields in order; `OMIT_NONE` fields left out while None, `json_key`
    renames, `SKIP` drops; through lists and dicts; NaN still null once dumped."""
    import dataclasses

    from headroom.jsonio import OMIT_NONE, SKIP, dumps, json_key, plain

    @dataclasses.dataclass
    class Inner:
        x: float

    @dataclasses.dataclass
    class Outer:
        source: str = dataclasses.field(metadata=json_key("trace"))
        items: list = dataclasses.field(default_factory=list)
        extra: object = dataclasses.field(default=None, metadata=OMIT_NONE)
        cache: object = dataclasses.field(default=None, metadata=SKIP)
        kept: object = None

    o = Outer("a.json", [Inner(1.5), {"k": Inner(float("nan"))}], cache=object())
    assert plain(o)["items"][0] == {"x": 1.5} and "cache" not in plain(o) and "extra" not in plain(o)
    assert dumps(o) == '{"trace": "a.json", "items": [{"x": 1.5}, {"k": {"x": null}}], "kept": null}'
    assert list(plain(Outer("b", extra=2))) == ["trace", "items", "extra", "kept"]
