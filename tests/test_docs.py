"""The documentation's code runs as written: README's "Adding a workload" points at the example in
docs/workloads.md, which must register a workload through the plug-in API."""

from __future__ import annotations

import re
from pathlib import Path

from headroom.profile.registry import get_workload, load_workload_file
from headroom.profile.workload import Options

REPO = Path(__file__).resolve().parents[1]


def test_readme_points_at_the_workload_example():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Adding a workload"):]
    assert "workloads/" in section and "docs/workloads.md" in section and "--workload-file" in section


def test_the_workload_example_registers_as_written(tmp_path):
    doc = (REPO / "docs" / "workloads.md").read_text()
    code = re.search(r"```python\n(# my_mlp\.py.*?)```", doc, re.S).group(1)
    path = tmp_path / "my_mlp.py"
    path.write_text(code)
    added = load_workload_file(path)
    assert [s.name for s in added] == ["my-mlp"] and get_workload("my-mlp") is added[0]
    spec = added[0]
    cfg = spec.resolve(Options(), "cpu")
    assert (cfg.mode, cfg.batch, cfg.dtype) == ("infer", 64, "float32")      # its CPU policy
    assert spec.resolve(Options(), "cuda").batch == 8192
    assert spec.param_count_meta() == 2 * 4096 * 16384 + 16384 + 4096
