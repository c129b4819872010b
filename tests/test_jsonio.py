"""The one JSON writer: valid JSON (NaN -> null), numpy values as numbers, atomic files."""

from __future__ import annotations

import json
import math
from typing import ClassVar  # at module level: a dataclass resolves its string annotations here

import numpy as np
import pytest

from headroom.jsonio import atomic_file, dumps, write_json


def test_non_finite_numbers_become_null_and_numpy_values_numbers():
    text = dumps(
        {
            "a": math.nan,
            "b": [1.5, math.inf, np.float64("nan")],
            "c": np.int64(7),
            "d": np.float32(0.5),
            "e": np.array([1.0, np.nan]),
        }
    )
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
    assert json.loads(path.read_text()) == {"x": None}  # the old file is intact
    assert sorted(p.name for p in path.parent.iterdir()) == ["doc.json"]  # no temporary left behind


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


def test_plain_writes_json_keys_in_their_order_with_computed_values_rounding_and_conditions():
    """`JSON_KEYS` orders fields and properties (a field left out of it is no key); `rounded` rounds a float
    and each float of a list; `omit_if` tests the whole object; `encoded` rewrites a value that is not None;
    `columns` picks a DataFrame's columns; a `(key, property)` pair names a property's key."""
    import dataclasses
    from typing import ClassVar

    import pandas as pd

    from headroom.jsonio import columns, encoded, omit_if, plain, rounded

    @dataclasses.dataclass
    class R:
        a: float
        hidden: int
        times: list = dataclasses.field(metadata=rounded(2))
        world: int = dataclasses.field(default=1, metadata=omit_if(lambda r: r.world <= 1))
        pair: tuple | None = dataclasses.field(default=None, metadata=encoded(lambda t: {"lo": t[0], "hi": t[1]}))
        rows: pd.DataFrame | None = dataclasses.field(default=None, metadata=columns("y", "x"))

        JSON_KEYS: ClassVar[tuple] = ("double", "a", "times", "world", "pair", "rows", ("n_times", "count"))

        @property
        def count(self) -> int:
            return len(self.times)

        @property
        def double(self) -> float:
            return 2 * self.a

    r = R(1.25, 7, [1.23456, 2, 3.999])
    assert plain(r) == {"double": 2.5, "a": 1.25, "times": [1.23, 2, 4.0], "pair": None, "rows": None, "n_times": 3}
    frame = pd.DataFrame({"x": [1, 2], "y": [0.5, float("nan")], "z": ["no", "no"]})
    wide = R(0.5, 0, [], world=4, pair=(3, 9), rows=frame)
    assert plain(wide)["world"] == 4 and plain(wide)["pair"] == {"lo": 3, "hi": 9}
    assert dumps(wide.rows) == '[{"x": 1, "y": 0.5, "z": "no"}, {"x": 2, "y": null, "z": "no"}]'
    assert dumps(wide).endswith('"rows": [{"y": 0.5, "x": 1}, {"y": null, "x": 2}], "n_times": 0}')


def test_a_propertys_metadata_is_in_json_meta():
    """A property named in `JSON_KEYS` takes its metadata from `JSON_META`: left out while None, encoded
    otherwise (a projection's `unprofiled`)."""
    import dataclasses

    from headroom.jsonio import OMIT_NONE, encoded, plain

    @dataclasses.dataclass
    class P:
        base: float
        after: float | None = None

        JSON_KEYS: ClassVar[tuple] = ("base", "ratio", "pair")
        JSON_META: ClassVar[dict] = {"ratio": OMIT_NONE, "pair": encoded(lambda t: {"lo": t[0], "hi": t[1]})}

        @property
        def ratio(self) -> float | None:
            return None if self.after is None else self.base / self.after

        @property
        def pair(self) -> tuple[float, float]:
            return (self.base, self.after or 0.0)

    assert plain(P(3.0)) == {"base": 3.0, "pair": {"lo": 3.0, "hi": 0.0}}
    assert plain(P(3.0, 2.0)) == {"base": 3.0, "ratio": 1.5, "pair": {"lo": 3.0, "hi": 2.0}}


def test_plain_turns_enums_paths_numpy_and_msgspec_structs_into_builtins():
    import enum
    from pathlib import Path

    import msgspec
    import numpy as np

    from headroom.jsonio import plain

    class Colour(enum.Enum):
        RED = "red"

    class Point(msgspec.Struct):
        x: int
        tag: str = "p"

    got = plain(
        {
            "c": Colour.RED,
            "p": Path("a/b.json"),
            "i": np.int64(3),
            "f": np.float32(0.5),
            "v": np.array([1, 2]),
            "s": Point(4),
            "b": np.bool_(True),
        }
    )
    assert got == {"c": "red", "p": "a/b.json", "i": 3, "f": 0.5, "v": [1, 2], "s": {"x": 4, "tag": "p"}, "b": True}
    assert [type(got[k]) for k in ("i", "f", "b")] == [int, float, bool]


def test_plain_of_a_plain_dataclass_round_trips_through_json():
    """Property: a dataclass without metadata dumps to the object `dataclasses.asdict` gives (tuples as lists,
    non-finite floats as null), keys in field order."""
    import dataclasses

    from hypothesis import given
    from hypothesis import strategies as st

    @dataclasses.dataclass
    class Leaf:
        n: int
        x: float

    @dataclasses.dataclass
    class Node:
        name: str
        leaves: list
        pair: tuple

    def expected(v):
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: expected(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [expected(x) for x in v]
        return v

    leaf = st.builds(Leaf, st.integers(-(2**53), 2**53), st.floats())
    node = st.builds(Node, st.text(), st.lists(leaf, max_size=4), st.tuples(st.floats(), st.integers()))

    @given(node)
    def check(n: Node) -> None:
        back = json.loads(dumps(n))
        assert back == expected(dataclasses.asdict(n)) and list(back) == ["name", "leaves", "pair"]

    check()
