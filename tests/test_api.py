"""The facade: `import headroom; headroom.analyze / project / targets / summary`, with .to_frame()."""

from __future__ import annotations

import subprocess
import sys

import pytest

import headroom
from tests.conftest import SHIPPED_TRACES

DLRM = SHIPPED_TRACES / "dlrm.train.json.gz"


@pytest.fixture(scope="module")
def dlrm():
    return headroom.analyze(DLRM)


def test_analyze_and_its_frame(dlrm):
    assert isinstance(dlrm, headroom.Analysis) and dlrm.label == "dlrm train"
    f = dlrm.to_frame()
    assert f.loc[0, "name"] == "gemm" and round(100 * f.loc[0, "fraction"], 1) == 36.4
    assert round(100 * f.loc[f["addressable"], "fraction"].sum(), 1) == 63.4


def test_project_matches_the_readme(dlrm):
    """README, "What it says": the DLRM trace with embedding kernels 1.552x faster."""
    r = headroom.project(dlrm, speedup=["category:embedding=1.552"])
    f = r.to_frame().set_index(["scenario", "method"])
    assert round(f.loc[("speedups", "amdahl"), "projected_ms_per_step"], 3) == 19.452
    assert round(f.loc[("speedups", "replay"), "projected_ms_per_step"], 3) == 19.684
    assert round(f.loc[("zero_time", "amdahl"), "projected_ms_per_step"], 3) == 18.453
    assert round(f.loc[("zero_time", "replay"), "projected_ms_per_step"], 3) == 19.184
    assert round(100 * f.loc[("speedups", "amdahl"), "gain"], 2) == 2.76
    assert f.loc[("speedups", "amdahl"), "measured_ms_per_step"] == pytest.approx(20.0039, abs=1e-4)


def test_project_from_a_path_and_a_file(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[[speedup]]\nselect = "category:embedding"\nspeedup = 1.552\n')
    r = headroom.project(DLRM, files=[f])
    assert round(r.get("amdahl").per_step_us / 1e3, 3) == 19.452 and r.entries[0]["source"] == str(f)


def test_targets_result(dlrm):
    t = headroom.targets(dlrm, top=3)
    f = t.to_frame()
    assert f["name"].tolist()[:2] == ["aten::_index_put_impl_", "aten::mm"]
    assert round(100 * f.loc[0, "gain"], 2) == 9.10
    d = t.to_dict()
    assert d["speedup"] == 1.5 and d["targets"][0]["name"] == "aten::_index_put_impl_"


def test_summary_and_analyze_all():
    rows = headroom.summary(headroom.analyze_all(SHIPPED_TRACES / "scaling"))
    assert sorted(rows["workload"]) == ["llama-7b infer prefill 4of40-layers", "llama-7b infer prefill 4of80-layers"]


def test_import_headroom_loads_no_data_libraries():
    """The facade is loaded on first use: processes that need only part of headroom stay light."""
    code = "import headroom, headroom.errors, sys; print(sorted(m for m in ('pandas', 'polars', 'torch') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"
