"""The Kineto fields the loader reads (headroom/data/kineto.toml: one row per field), and what is built
from the rows.

A row names the field's column (and struct attribute), its key in the trace, where it sits (on the event or
in its `args`), its type, the tables that keep it as a column and whether a GPU activity or step without it
is impossible. From the rows come the msgspec structs both decode paths use (`FastArgs`/`FastEvent`:
Kineto's own types; `LooseArgs`/`LooseEvent`: every spelling seen in the wild), each table's column list
and polars schema, and the C scanner's key table (`scripts/gen_scan_keys.py` writes `_scan_keys.h` from
the same file at build time; `tests/test_scan.py` regenerates it and compares). Columns that are no Kineto
field (`kind`, `inputs`, `index`) are rows too (place "derived"), so a table's column order is the rows'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from headroom.datafiles import shipped

# Where a field sits.
EVENT, ARGS, DERIVED = "event", "args", "derived"


@dataclass(frozen=True)
class Field:
    """One row of kineto.toml (its header says what each part means)."""

    column: str
    key: str
    place: str
    type: str
    tables: tuple[str, ...] = ()
    required: bool = False
    on_demand: bool = False
    polars: str | None = None


_DATA = shipped("kineto.toml")
TABLES: tuple[str, ...] = tuple(_DATA["tables"]["names"])
FIELDS = tuple(
    Field(
        column=row["column"],
        key=row.get("key", ""),
        place=row["place"],
        type=row["type"],
        tables=tuple(row.get("tables", ())),
        required=row.get("required", False),
        on_demand=row.get("on_demand", False),
        polars=row.get("polars"),
    )
    for row in _DATA["field"]
)

Id = int | str | None
# The msgspec type of each kind of field that is decoded: (fast path, lenient path).
STRUCT_TYPES: dict[str, tuple[Any, Any]] = {
    "text": (str, str),
    "thread": (int | str, int | str),
    "time": (float | None, float | str | None),
    "number": (int | float | None, int | float | str | None),
    "id": (int | None, Id),
    "small_id": (int | None, Id),
    "raw": (msgspec.Raw, msgspec.Raw),
}
# The value of an absent field (None where not given).
DEFAULTS: dict[str, Any] = {"text": "", "thread": 0, "raw": msgspec.Raw()}

BY_COLUMN = {f.column: f for f in FIELDS}
# The fields the loader decodes, on the event and in its args.
EVENT_FIELDS = tuple(f for f in FIELDS if f.place == EVENT and not f.on_demand)
ARG_FIELDS = tuple(f for f in FIELDS if f.place == ARGS and not f.on_demand)
# Kineto's key of each field (by column).
KEYS = {f.column: f.key for f in FIELDS if f.place != DERIVED}
TABLE_COLUMNS = {t: [f.column for f in FIELDS if t in f.tables] for t in TABLES}
POLARS_TYPES: dict[str, str] = {f.column: f.polars or _DATA["types"][f.type]["polars"] for f in FIELDS if f.tables}
# Columns of ids kept to 64 bits (a value beyond: null).
SMALL_IDS = frozenset(f.column for f in FIELDS if f.type == "small_id")
# The fields a GPU activity or step must have, finite (validate.py), in the order they are checked.
REQUIRED = tuple(f.column for f in FIELDS if f.required)


def _renamed(fields: tuple[Field, ...]) -> dict[str, str]:
    return {f.column: f.key for f in fields if f.key != f.column}


def _struct(name: str, fields: tuple[Field, ...], loose: bool, *more: tuple[str, Any, Any], **options: Any) -> Any:
    """A msgspec struct of `fields` (each with its type's default when absent), and `more` (name, type, default)."""
    specs = [(f.column, STRUCT_TYPES[f.type][1 if loose else 0], DEFAULTS.get(f.type)) for f in fields]
    return msgspec.defstruct(name, [*specs, *more], rename=_renamed(fields) or None, gc=False, **options)


# The fast path: the types Kineto writes; msgspec skips every other field (call stacks, occupancy numbers)
# without building objects. Frozen args: one shared empty value stands in where an event has none, so
# `args.x` reads never test for None (an explicit `"args": null` is not Kineto's; it takes the lenient path).
FastArgs = _struct("FastArgs", ARG_FIELDS, False, frozen=True)
NO_ARGS = FastArgs()
FastEvent = _struct("FastEvent", EVENT_FIELDS, False, ("args", FastArgs, NO_ARGS))
# The lenient path: every spelling seen in the wild, normalised into a FastEvent (kineto.normalised).
LooseArgs = _struct("LooseArgs", ARG_FIELDS, True)
LooseEvent = _struct("LooseEvent", EVENT_FIELDS, True, ("args", LooseArgs | None, None))
