"""lab/ holds GPU campaign scripts and one-off probes. They depend on the product; the product never depends
on them: no module of headroom/ (or workloads/) imports lab, and lab/README.md says what each script is for."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def lab_importers(root: Path) -> list[str]:
    return sorted(
        f"{p.relative_to(root)}: {n}"
        for p in sorted(root.rglob("*.py"))
        for n in _imports(p)
        if n == "lab" or n.startswith("lab.")
    )


def test_the_product_never_imports_lab():
    found = lab_importers(REPO / "headroom") + lab_importers(REPO / "workloads")
    assert not found, found


def test_the_check_catches_an_import_of_lab(tmp_path):
    (tmp_path / "a.py").write_text("import os\nfrom lab.probes.layers_check import check\n")
    (tmp_path / "b.py").write_text("import labels\nfrom .lab import x\n")
    assert lab_importers(tmp_path) == ["a.py: lab.probes.layers_check"]


def test_lab_readme_names_every_script():
    readme = (REPO / "lab" / "README.md").read_text()
    scripts = [
        p
        for p in sorted((REPO / "lab").rglob("*"))
        if p.suffix in (".py", ".sh") and p.name != "__init__.py" and p.parent.name in ("gpu", "probes")
    ]
    assert len(scripts) >= 20
    missing = [str(p.relative_to(REPO)) for p in scripts if f"`{p.name}`" not in readme]
    assert not missing, missing
    assert re.search(r"depend[s]? on the product", readme) and "imports" in readme
