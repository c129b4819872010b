"""The layout's promises: imports point down the data flow (import-linter's contracts in
pyproject.toml), workload plug-ins use only the plug-in API, and every package is installed."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is not installed (pip install -e '.[test]')")
    p = subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    kept = re.search(r"Contracts: (\d+) kept, (\d+) broken", p.stdout)
    assert kept and int(kept.group(1)) >= 3 and kept.group(2) == "0", p.stdout[-2000:]


def test_a_broken_contract_fails(tmp_path):
    """The contract can fail: a trace module that imports the report layer breaks it."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is not installed")
    config = tmp_path / "contract.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["headroom"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "report may not import project"\n'
        'type = "forbidden"\nsource_modules = ["headroom.report"]\n'
        'forbidden_modules = ["headroom.projection"]\n'
    )
    p = subprocess.run(
        [exe, "--no-cache", "--config", str(config)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 1 and "BROKEN" in p.stdout and "headroom.report" in p.stdout


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_workload_plugins_use_only_the_plugin_api():
    """import-linter cannot see workloads/ (installed as headroom.workloads by a package-dir mapping)."""
    allowed = ("headroom.profile", "headroom.errors", "headroom.trace.ranges", "headroom.workloads")
    for f in sorted((REPO / "workloads").glob("*.py")):
        bad = sorted(m for m in _imports(f) if m.startswith("headroom") and not m.startswith(allowed))
        assert not bad, f"{f.name} imports {bad}"


def test_every_package_is_installed():
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(doc["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "headroom").rglob("__init__.py")}
    assert on_disk | {"headroom.workloads"} == listed
    assert doc["tool"]["setuptools"]["package-dir"] == {"headroom.workloads": "workloads"}


def test_the_cycle_contracts_fail_on_a_cycle(tmp_path):
    """The contracts of pyproject.toml that forbid cycles, run on a package with one: two sibling modules
    that import each other, and a module that imports its root package, are each reported."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is not installed")
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    names = {"No import cycles between the modules of a package", "No module below the facade imports the root package"}
    contracts = [c for c in doc["tool"]["importlinter"]["contracts"] if c["name"] in names]
    assert len(contracts) == 2
    pkg = tmp_path / "headroom"
    (pkg / "extract").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "extract" / "__init__.py").write_text("")
    (pkg / "extract" / "ops.py").write_text("from headroom.extract import run\n")
    (pkg / "extract" / "run.py").write_text("def f():\n    from headroom.extract import ops\n")
    (pkg / "environment.py").write_text("import headroom\n")
    lines = ["[tool.importlinter]", 'root_packages = ["headroom"]']
    for c in contracts:
        lines += ["", "[[tool.importlinter.contracts]]"]
        lines += [f"{k} = {json.dumps(v)}" for k, v in c.items() if k != "ignore_imports"]
    (tmp_path / "contracts.toml").write_text("\n".join(lines) + "\n")
    p = subprocess.run(
        [exe, "--no-cache", "contracts.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert p.returncode == 1, p.stdout[-3000:]
    assert "Contracts: 0 kept, 2 broken." in p.stdout
    assert "No cycles are allowed in headroom.extract." in p.stdout
    assert "headroom.environment is not allowed to import headroom" in p.stdout


def _strip_parentheses(text: str) -> str:
    out, depth = [], 0
    for ch in text:
        depth += ch == "("
        if depth == 0:
            out.append(ch)
        depth -= ch == ")" and depth > 0
    return "".join(out)


def _documented_tree() -> dict[str, set[str]]:
    """docs/architecture.md's tree: for `headroom/` and each folder in it, the names it lists (a module's
    stem, a folder as `name/`, a data file by its name), parenthesised remarks left out."""
    text = (REPO / "docs" / "architecture.md").read_text()
    block = text.split("## The tree", 1)[1].split("```", 2)[1]
    listed: dict[str, set[str]] = {"": set()}
    texts: dict[str, str] = {}
    folder = None
    for line in block.splitlines():
        top = re.match(r"^  (\S+)\s+(.*)$", line)
        if top and top.group(1).endswith("/"):
            folder = top.group(1).rstrip("/")
            texts[folder] = top.group(2)
        elif top:
            folder = None
            listed[""].add(top.group(1).removesuffix(".py"))
        elif folder is not None and line.startswith(" " * 19):
            texts[folder] += " " + line.strip()
        else:
            folder = None
    for folder, rest in texts.items():
        if folder == "data":  # data/ opens with a description: its names are the .toml files
            listed[folder] = set(re.findall(r"[\w.]+\.toml", rest))
            continue
        listed[folder] = set()
        for item in _strip_parentheses(rest).split(","):
            name = re.match(r"\s*([\w.]+/?)", item)
            if name:
                listed[folder].add(name.group(1))
            listed[folder] |= set(re.findall(r"\+\s*(\w+)", item))  # `run + worker`
    return listed


def test_architecture_tree_names_every_module():
    """The tree in docs/architecture.md lists each folder's modules (and data files, sub-folders), and no
    module that is not there: a new, renamed or removed module fails here until the doc says so."""
    listed = _documented_tree()
    pkg = REPO / "headroom"
    skip = {"__init__", "__main__"}
    on_disk = {
        "": {p.stem for p in pkg.glob("*.py")}
        | {p.name + "/" for p in pkg.iterdir() if p.is_dir() and p.name != "__pycache__"}
    }
    for d in sorted(p for p in pkg.iterdir() if p.is_dir() and p.name != "__pycache__"):
        names = {p.stem for p in d.glob("*.py")} | {p.name for p in d.glob("*.toml")}
        names |= {p.name + "/" for p in d.iterdir() if p.is_dir() and p.name != "__pycache__"}
        on_disk[d.name] = names
    top_listed = listed.pop("") | {f + "/" for f in listed}
    assert top_listed - {"__init__"} == on_disk.pop("") - {"__init__"}
    assert set(listed) == set(on_disk), "folders of headroom/ missing from the tree, or listed but absent"
    for folder, names in on_disk.items():
        assert listed[folder] - skip == names - skip, folder
