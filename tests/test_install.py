"""The light core: `pip install kernel-headroom` into a fresh virtual environment (no torch, no
transformers, no nvtx) classifies a shipped trace, lists the eleven workloads, and `headroom profile`
says in one line which extra to install.

The environment is clean (no --system-site-packages). The core's dependencies come from the
machine's pip (its cache, else the index), pinned to the versions this interpreter runs, so the
test takes well under a minute once they are cached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORE = ("numpy", "pandas", "msgspec", "polars", "typer", "rich", "matplotlib", "google-re2", "filelock", "lazy_loader")

# Fresh virtual environments filled by pip: minutes on 2 cores (`make test-slow`, CI).
pytestmark = [pytest.mark.install, pytest.mark.slow]


def _run(args: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("core")
    src = root / "src"  # a copy: pip builds in the source tree
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("headroom", "workloads"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    venv = root / "venv"
    p = _run([sys.executable, "-m", "venv", venv])
    assert p.returncode == 0, p.stderr
    py = venv / "bin" / "python"
    pins = [f"{name}=={version(name)}" for name in CORE]
    pip = [py, "-m", "pip", "--disable-pip-version-check", "-q", "install"]
    p = _run([*pip, *pins])
    if p.returncode != 0:
        pytest.fail(f"installing the core dependencies failed: {p.stderr[-2000:]}")
    p = _run([*pip, "--no-deps", src])
    assert p.returncode == 0, p.stderr[-2000:]
    return venv


def test_the_core_installs_without_torch(core_venv):
    py = core_venv / "bin" / "python"
    p = _run(
        [
            py,
            "-c",
            "import importlib.util as u; print([m for m in ('torch', 'transformers', 'nvtx', 'torchrec')"
            " if u.find_spec(m)])",
        ]
    )
    assert p.stdout.strip() == "[]"
    p = _run([py, "-m", "pip", "show", "kernel-headroom"])
    assert "Name: kernel-headroom" in p.stdout


def test_classify_a_shipped_trace_without_torch(core_venv):
    p = _run(
        [core_venv / "bin" / "headroom", "classify", "--json", REPO / "traces" / "llama-7b.infer.prefill.json.gz"],
        cwd=core_venv,
        env={**os.environ, "HEADROOM_CACHE_DIR": "off"},
    )
    assert p.returncode == 0, p.stderr
    _check_llama_classification(p.stdout)


def _check_llama_classification(stdout: str) -> None:
    d = json.loads(stdout)
    assert round(100 * d["addressable_fraction"], 1) == 37.1
    cats = {c["name"]: c for c in d["categories"]}
    assert round(100 * cats["gemm"]["fraction"], 1) == 58.6 and cats["gemm"]["count"] == 678
    assert d["device"] == "NVIDIA H200" and d["num_steps"] == 3


def test_the_install_compiles_the_loaders_c_scanner(core_venv):
    p = _run(
        [core_venv / "bin" / "python", "-c", "from headroom.trace import scan; print(scan.SCANNER is not None)"],
        cwd=core_venv,
    )
    assert p.stdout.strip() == "True", p.stderr


def test_without_a_compiler_the_install_works_and_loads_by_msgspec(core_venv, tmp_path):
    # setuptools builds the scanner as an optional extension: a failed compile leaves it out of the wheel.
    src = tmp_path / "src"  # a fresh copy: the fixture's holds its build folder
    shutil.copytree(core_venv.parent / "src", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so"))
    p = _run(
        [
            core_venv / "bin" / "python",
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "wheel",
            "--no-deps",
            "-w",
            tmp_path / "wheel",
            src,
        ],
        env={**os.environ, "CC": "/bin/false"},
    )
    assert p.returncode == 0, p.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    p = _run(
        [
            core_venv / "bin" / "python",
            "-m",
            "pip",
            "--disable-pip-version-check",
            "-q",
            "install",
            "--no-deps",
            "--target",
            tmp_path / "site",
            wheel,
        ]
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert not list((tmp_path / "site" / "headroom" / "trace").glob("_scan*.so"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "HEADROOM_CACHE_DIR": "off"}
    p = _run(
        [core_venv / "bin" / "python", "-c", "from headroom.trace import scan; print(scan.__file__, scan.SCANNER)"],
        cwd=tmp_path,
        env=env,
    )
    assert p.stdout.split() == [str(tmp_path / "site" / "headroom" / "trace" / "scan.py"), "None"], p.stderr
    p = _run(
        [
            core_venv / "bin" / "python",
            "-m",
            "headroom.cli",
            "classify",
            "--json",
            REPO / "traces" / "llama-7b.infer.prefill.json.gz",
        ],
        cwd=tmp_path,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    _check_llama_classification(p.stdout)


def test_the_installed_package_has_its_eleven_workloads(core_venv):
    p = _run([core_venv / "bin" / "headroom", "workloads", "--json"], cwd=core_venv)
    assert p.returncode == 0, p.stderr
    listed = json.loads(p.stdout)["workloads"]
    names = sorted(w["name"] for w in listed)
    assert names == [
        "bert-base",
        "deepfm",
        "din",
        "dlrm",
        "dlrm-dcn",
        "dlrm-int8",
        "gpt2-xl",
        "llama-7b",
        "mixtral-8x7b",
        "resnet-50",
        "vit-b-16",
    ]
    assert all("site-packages/headroom/workloads/" in w["source"] for w in listed)


def test_profile_without_torch_names_the_extra(core_venv):
    p = _run([core_venv / "bin" / "headroom", "profile", "llama-7b"], cwd=core_venv)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [
        "headroom: error: `headroom profile` needs torch, which is not installed: pip install 'kernel-headroom[profile]'"
    ]
