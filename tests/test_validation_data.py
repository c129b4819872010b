"""The committed GPU validation results (docs/gpu/validation.json) are what their committed traces and
timings (docs/gpu/validation/<name>/) give: every number re-derived with the code at hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headroom.validate.result import recompute

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "docs" / "gpu" / "validation.json"
RUNS = REPO / "docs" / "gpu" / "validation"


def _committed() -> list[dict]:
    if not DATA.is_file():
        pytest.skip("no committed GPU validation results yet (docs/gpu/validation.json)")
    return json.loads(DATA.read_text())


def _key(r: dict) -> str:
    return json.dumps([r["workload"], r["replacements"], r.get("config")], sort_keys=True)


def test_every_committed_result_is_recomputed_exactly_from_its_traces():
    results = _committed()
    assert results, "docs/gpu/validation.json is empty"
    again = {}
    for d in sorted(p for p in RUNS.iterdir() if (p / "run.json").is_file()):
        r = recompute(d)
        again[_key(r)] = (d.name, r)
    for r in results:
        assert _key(r) in again, f"no run directory under {RUNS} for {r['workload']} {r['replacements']}"
        name, fresh = again[_key(r)]
        assert fresh == r, (f"{name}: the committed result is not what its traces give now; regenerate: "
                            f"python3 -m headroom.validate.collect docs/gpu/validation/*/ > docs/gpu/validation.json")


def test_the_set_covers_launch_bound_training_and_three_workloads():
    results = _committed()
    assert len(results) >= 5
    assert len({r["workload"] for r in results}) >= 3
    assert any(r["baseline"]["launch_bound"] for r in results)
    assert any((r.get("config") or {}).get("mode") == "train" for r in results)
    for r in results:
        assert r["check"]["passed"] and r["measured"]["rounds"] >= 7
        lo, hi = r["measured"]["ci"]
        assert lo <= r["measured"]["speedup"] <= hi
