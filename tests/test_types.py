"""The type check: mypy over the whole package ([tool.mypy] in pyproject.toml) finds no error, and the
check can fail (a module with a type error is reported by path, line and error code)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _mypy(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.fail("mypy is not installed (pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=cwd, capture_output=True, text=True, timeout=900)


def test_the_package_type_checks():
    p = _mypy("--config-file", str(REPO / "pyproject.toml"))
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
    checked = re.search(r"Success: no issues found in (\d+) source files", p.stdout)
    # Every module of headroom/ is checked, not a subset a wrong `files` setting would leave.
    n_modules = sum(1 for _ in (REPO / "headroom").rglob("*.py"))
    assert checked and int(checked.group(1)) == n_modules, p.stdout[-2000:]


def test_a_type_error_fails(tmp_path):
    """The same settings report a wrong argument type (the check can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x: int) -> int:\n    return x\n\n\ndef g():\n    f('text')\n")
    p = _mypy(
        "--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"), str(bad), cwd=tmp_path
    )
    assert p.returncode == 1
    # Reported inside an unannotated function: check_untyped_defs is on.
    assert re.search(r"bad\.py:6: error: .*\[arg-type\]", p.stdout), p.stdout
