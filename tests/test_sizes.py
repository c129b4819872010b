"""The size ratchet: no module over 500 lines, no function over 100, at most 10 functions over 80 (headroom/ and
workloads/, read by ast). Today's offenders are listed in tests/data/sizes.toml with their sizes: a new offender
fails, a listed one may not grow, and one that shrank must have its entry lowered (or removed once under the limit),
so the list only ever gets shorter.

`python tests/test_sizes.py --tighten` lowers the entries that shrank and removes those now under their limit
(it never adds an entry nor raises one).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[1]
RATCHET = REPO / "tests" / "data" / "sizes.toml"
ROOTS = ("headroom", "workloads")
MODULE_LINES = 500
FUNCTION_LINES = 100
LONG_FUNCTION_LINES = 80
LONG_FUNCTIONS_ALLOWED = 10


@dataclass(frozen=True)
class Sizes:
    modules: dict[str, int]  # "path" -> lines
    functions: dict[str, int]  # "path::Qual.name" -> lines (def line to last line, decorators excluded)


def measure(repo: Path = REPO, roots: tuple[str, ...] = ROOTS) -> Sizes:
    modules: dict[str, int] = {}
    functions: dict[str, int] = {}
    for root in roots:
        for path in sorted((repo / root).rglob("*.py")):
            rel = path.relative_to(repo).as_posix()
            text = path.read_text(encoding="utf-8")
            modules[rel] = len(text.splitlines())
            _functions(ast.parse(text, rel), f"{rel}::", functions)
    return Sizes(modules, functions)


def _functions(node: ast.AST, prefix: str, out: dict[str, int]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + child.name
            key, n = name, 2
            while key in out:  # a redefinition (a property's setter, a branch's variant): numbered
                key, n = f"{name}#{n}", n + 1
            out[key] = (child.end_lineno or child.lineno) - child.lineno + 1
            _functions(child, f"{name}.", out)
        elif isinstance(child, ast.ClassDef):
            _functions(child, f"{prefix}{child.name}.", out)
        else:
            _functions(child, prefix, out)


def load_ratchet(path: Path = RATCHET) -> dict[str, dict[str, int]]:
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    return {k: dict(doc.get(k, {})) for k in ("modules", "functions", "long_functions")}


def violations(sizes: Sizes, ratchet: dict[str, dict[str, int]]) -> list[str]:
    """Every way the tree breaks the ratchet, one line each, saying what to do."""
    out: list[str] = []
    long_now = {k: v for k, v in sizes.functions.items() if LONG_FUNCTION_LINES < v <= FUNCTION_LINES}
    for kind, limit, now, what in (
        ("modules", MODULE_LINES, sizes.modules, "module"),
        ("functions", FUNCTION_LINES, sizes.functions, "function"),
        ("long_functions", LONG_FUNCTION_LINES, long_now, "function"),
    ):
        listed = ratchet[kind]
        # a function listed over 100 lines that shrank to 81-100 is not a new long one (its entry moves)
        known = {**ratchet["functions"], **listed} if kind == "long_functions" else listed
        for name, lines in sorted(now.items()):
            if lines <= limit:
                continue
            if name not in known:
                if kind == "long_functions" and len(long_now) <= LONG_FUNCTIONS_ALLOWED:
                    continue  # within the ten allowed
                out.append(f"{name}: a new {what} of {lines} lines (over {limit}); split it by concept")
            elif lines > known[name]:
                out.append(
                    f"{name}: {lines} lines, grew from the {known[name]} listed in {RATCHET.name} [{kind}]; "
                    f"split it rather than raise the entry"
                )
        for name, allowed in sorted(listed.items()):
            lines = sizes.functions.get(name) if kind != "modules" else sizes.modules.get(name)
            if lines is not None and kind == "functions" and LONG_FUNCTION_LINES < lines <= limit:
                out.append(
                    f"{name}: now {lines} lines (limit {limit}): move its entry to [long_functions] with {lines} "
                    f"(python tests/test_sizes.py --tighten)"
                )
            elif lines is None or lines <= limit or (kind == "long_functions" and lines > FUNCTION_LINES):
                out.append(
                    f"{name}: now {lines if lines is not None else 'gone'} (limit {limit}): remove its entry "
                    f"from {RATCHET.name} [{kind}] (python tests/test_sizes.py --tighten)"
                )
            elif lines < allowed:
                out.append(
                    f"{name}: now {lines} lines, listed at {allowed}: lower the entry in {RATCHET.name} "
                    f"[{kind}] (python tests/test_sizes.py --tighten)"
                )
    return out


def tighten(sizes: Sizes, ratchet: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """The ratchet with shrunk entries lowered and those under their limit removed; nothing added or raised."""
    limits = {"modules": MODULE_LINES, "functions": FUNCTION_LINES, "long_functions": LONG_FUNCTION_LINES}
    out: dict[str, dict[str, int]] = {kind: {} for kind in ratchet}
    for kind, listed in ratchet.items():
        now = sizes.modules if kind == "modules" else sizes.functions
        for name, allowed in listed.items():
            lines = now.get(name)
            if lines is not None and kind == "functions" and LONG_FUNCTION_LINES < lines <= FUNCTION_LINES:
                out["long_functions"][name] = lines
                continue
            if lines is None or lines <= limits[kind] or (kind == "long_functions" and lines > FUNCTION_LINES):
                continue
            out[kind][name] = min(lines, allowed)
    return out


def write_ratchet(ratchet: dict[str, dict[str, int]], path: Path = RATCHET) -> None:
    head = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    lines = head[:]
    for kind in ("modules", "functions", "long_functions"):
        lines += ["", f"[{kind}]"]
        lines += [f'"{name}" = {n}' for name, n in sorted(ratchet[kind].items(), key=lambda kv: (-kv[1], kv[0]))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# --- the tests ---------------------------------------------------------------------------------------------------


def test_no_module_or_function_outgrows_the_ratchet():
    problems = violations(measure(), load_ratchet())
    assert not problems, "\n".join(problems)


def test_the_ratchet_lists_only_files_and_functions_that_exist():
    sizes, ratchet = measure(), load_ratchet()
    for kind, listed in ratchet.items():
        known = sizes.modules if kind == "modules" else sizes.functions
        assert set(listed) <= set(known), (kind, sorted(set(listed) - set(known)))


def _tree(tmp_path: Path, files: dict[str, str]) -> Sizes:
    for name, text in files.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    return measure(tmp_path, ("pkg",))


def _function(name: str, body_lines: int, indent: str = "") -> str:
    return f"{indent}def {name}():\n" + "".join(f"{indent}    x = {i}\n" for i in range(body_lines - 1))


def test_measure_counts_functions_methods_and_nested_functions(tmp_path):
    text = _function("f", 5) + "class C:\n" + _function("m", 3, "    ") + "    @property\n" + _function("p", 2, "    ")
    text += "    @p.setter\n    def p(self, v):\n        pass\n"
    sizes = _tree(tmp_path, {"a.py": text, "sub/b.py": "def outer():\n" + _function("inner", 4, "    ")})
    assert sizes.modules == {"pkg/a.py": len(text.splitlines()), "pkg/sub/b.py": 5}
    assert sizes.functions == {
        "pkg/a.py::f": 5,
        "pkg/a.py::C.m": 3,
        "pkg/a.py::C.p": 2,
        "pkg/a.py::C.p#2": 2,
        "pkg/sub/b.py::outer": 5,
        "pkg/sub/b.py::outer.inner": 4,
    }


def test_a_new_offender_fails_and_a_listed_one_may_not_grow(tmp_path):
    sizes = _tree(tmp_path, {"a.py": _function("big", 120) + _function("long", 90)})
    empty = {"modules": {}, "functions": {}, "long_functions": {}}
    found = violations(sizes, empty)
    assert len(found) == 1 and found[0].startswith("pkg/a.py::big: a new function of 120 lines"), found
    assert violations(sizes, {**empty, "functions": {"pkg/a.py::big": 120}}) == []
    grew = violations(sizes, {**empty, "functions": {"pkg/a.py::big": 110}})
    assert len(grew) == 1 and "grew from the 110 listed" in grew[0], grew
    big = _tree(tmp_path, {"a.py": "x = 1\n" * 501})
    assert [v.split(":")[0] for v in violations(big, empty)] == ["pkg/a.py"]


def test_more_than_ten_long_functions_fail_unless_listed(tmp_path):
    sizes = _tree(tmp_path, {f"m{i}.py": _function(f"f{i}", 81) for i in range(LONG_FUNCTIONS_ALLOWED + 1)})
    empty = {"modules": {}, "functions": {}, "long_functions": {}}
    assert len(violations(sizes, empty)) == LONG_FUNCTIONS_ALLOWED + 1
    listed = {f"pkg/m{i}.py::f{i}": 81 for i in range(LONG_FUNCTIONS_ALLOWED + 1)}
    assert violations(sizes, {**empty, "long_functions": listed}) == []
    (tmp_path / "pkg" / "m0.py").write_text(_function("f0", 80))
    assert violations(measure(tmp_path, ("pkg",)), empty) == []  # ten long ones: allowed unlisted


def test_an_entry_that_shrank_or_fell_under_the_limit_must_be_tightened(tmp_path):
    sizes = _tree(tmp_path, {"a.py": _function("big", 110) + _function("small", 50)})
    ratchet = {"modules": {}, "functions": {"pkg/a.py::big": 130, "pkg/a.py::small": 104}, "long_functions": {}}
    found = violations(sizes, ratchet)
    assert any("big: now 110 lines, listed at 130: lower the entry" in v for v in found), found
    assert any("small: now 50 (limit 100): remove its entry" in v for v in found), found
    tight = tighten(sizes, ratchet)
    assert tight["functions"] == {"pkg/a.py::big": 110} and violations(sizes, tight) == []


def test_a_function_that_shrank_under_100_moves_to_the_long_list(tmp_path):
    files = {f"m{i}.py": _function(f"f{i}", 85) for i in range(LONG_FUNCTIONS_ALLOWED - 1)}
    sizes = _tree(tmp_path, {**files, "a.py": _function("was_big", 90)})
    ratchet = {"modules": {}, "functions": {"pkg/a.py::was_big": 120}, "long_functions": {}}
    found = violations(sizes, ratchet)
    assert len(found) == 1 and "was_big: now 90 lines (limit 100): move its entry to [long_functions]" in found[0]
    tight = tighten(sizes, ratchet)
    assert tight == {"modules": {}, "functions": {}, "long_functions": {"pkg/a.py::was_big": 90}}
    assert violations(sizes, tight) == []


if __name__ == "__main__":
    if sys.argv[1:] != ["--tighten"]:
        raise SystemExit("usage: python tests/test_sizes.py --tighten")
    write_ratchet(tighten(measure(), load_ratchet()))
    print("\n".join(violations(measure(), load_ratchet())) or f"{RATCHET.relative_to(REPO)}: tight")
