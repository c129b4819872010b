"""Write the C scanner's key table (headroom/trace/_scan_keys.h) from the Kineto fields (headroom/data/kineto.toml).

Run at build time (setup.py's build_ext) and by tests/test_scan.py, which compares its output with the
header in the tree byte for byte. Reads the TOML directly (the build environment has no msgspec).

    python scripts/gen_scan_keys.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "headroom" / "data" / "kineto.toml"
HEADER = REPO / "headroom" / "trace" / "_scan_keys.h"

# The scanner's array kinds (kineto.toml's [types] scanner), the C names of their slots and where each may sit.
KINDS = {"int": "INT", "double": "DOUBLE", "raw": "RAW", "string": "STRING", "thread": "THREAD"}
ALLOWED = {"event": {"int", "double", "string", "thread"}, "args": {"int", "double", "raw"}}
# _scan.c interns the name and the (ph, cat) pair: these are the string fields it knows.
STRINGS = ["ph", "cat", "name"]


def fields(data: dict) -> list[dict]:
    """The loaded fields the scanner reads, each with its kind: the args' first within each kind."""
    out = []
    for row in data["field"]:
        if row["place"] == "derived" or row.get("on_demand", False):
            continue
        kind = data["types"][row["type"]].get("scanner")
        if kind not in ALLOWED[row["place"]]:
            raise SystemExit(f"{DATA}: {row['column']}: the scanner reads no {kind!r} field in {row['place']}")
        out.append({**row, "kind": kind})
    return sorted(out, key=lambda f: f["place"] != "args")  # stable: the rows' order within each place


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _enum(kind: str, members: list[dict]) -> list[str]:
    """`enum { KIND_COLUMN, ..., ARG_KINDS, ..., N_KINDS };` and the columns' names, by slot."""
    k = KINDS[kind]
    names = [f"{k}_{f['column'].upper()}" for f in members]
    args = sum(1 for f in members if f["place"] == "args")
    parts = (
        names[:args] + [f"ARG_{k}S"] + ([f"{names[args]} = ARG_{k}S"] + names[args + 1 :] if args < len(names) else [])
    )
    lines = [f"enum {{ {', '.join(parts)}, N_{k}S{'' if args < len(names) else f' = ARG_{k}S'} }};"]
    columns = ", ".join(_c_string(f["column"]) for f in members)
    lines.append(f"static const char *const {k}_COLUMNS[] = {{{columns}{', ' if columns else ''}NULL}};")
    return lines


def _dispatch(name: str, keys: list[tuple[str, str]]) -> list[str]:
    """A function from a key (k[0:n], unescaped) to its slot, switching on the key's length."""
    by_length: dict[int, list[tuple[str, str]]] = {}
    for key, slot in keys:
        by_length.setdefault(len(key.encode()), []).append((key, slot))
    lines = [f"static inline int {name}(const char *k, size_t n) {{", "    switch (n) {"]
    for n in sorted(by_length):
        lines.append(f"    case {n}:")
        for key, slot in by_length[n]:
            lines.append(f"        if (memcmp(k, {_c_string(key)}, {n}) == 0) return {slot};")
        lines.append("        break;")
    lines += ["    default:", "        break;", "    }", "    return 0;", "}"]
    return lines


def header(data: dict) -> str:
    read = fields(data)
    by_kind = {kind: [f for f in read if f["kind"] == kind] for kind in KINDS}
    strings = [f["column"] for f in by_kind["string"]]
    if sorted(strings) != sorted(STRINGS):
        raise SystemExit(f"{DATA}: the scanner's string fields are {STRINGS}, not {strings}")
    by_kind["string"] = [next(f for f in by_kind["string"] if f["column"] == c) for c in STRINGS]
    if len(by_kind["int"]) > 16:
        raise SystemExit(f"{DATA}: more than 16 integer fields (the scanner's `present` has 16 bits)")
    out = [
        "/* The C scanner's key table: generated from headroom/data/kineto.toml by scripts/gen_scan_keys.py",
        " * (at build time; tests/test_scan.py regenerates it and compares). Do not edit. */",
        "",
        "/* Slots of each kind of array, the args' first: int (int64, a bit of `present`), double (float64,",
        " * NaN: absent), raw (offset and length of the value's text), string (text), thread (a number, or text). */",
    ]
    for kind in KINDS:
        out += _enum(kind, by_kind[kind])
    out += [
        "",
        "/* A key's slot: its kind and its index among that kind's arrays; 0: a key the scanner skips. */",
        "enum { KIND_SKIP, " + ", ".join(f"KIND_{k}" for k in KINDS.values()) + ", KIND_ARGS };",
        "#define SLOT(kind, index) ((kind) << 8 | (index))",
        "#define SLOT_KIND(slot) ((slot) >> 8)",
        "#define SLOT_INDEX(slot) ((slot) & 0xff)",
        "",
    ]

    def slots(place: str) -> list[tuple[str, str]]:
        return [
            (f["key"], f"SLOT(KIND_{KINDS[f['kind']]}, {KINDS[f['kind']]}_{f['column'].upper()})")
            for f in read
            if f["place"] == place
        ]

    out += _dispatch("event_key", slots("event") + [("args", "SLOT(KIND_ARGS, 0)")])
    out += [""]
    out += _dispatch("args_key", slots("args"))
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the header in the tree differs")
    args = ap.parse_args()
    text = header(tomllib.loads(DATA.read_text()))
    if args.check:
        sys.exit(0 if HEADER.exists() and HEADER.read_text() == text else 1)
    if not HEADER.exists() or HEADER.read_text() != text:
        HEADER.write_text(text)


if __name__ == "__main__":
    main()
