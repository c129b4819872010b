"""The committed GPU validation results (docs/gpu/validation.json) are what their committed traces and
timings (docs/gpu/validation/<name>/) give: every number re-derived with the code at hand, through
`headroom validate --from DIR --json`; and the projection's accuracy targets, checked on them as facts.

The targets (docs/validation.md): the projection's error (`error.estimate`, projected / measured - 1)
within 3% where the GPU is the bottleneck and within 6% where the CPU's launches are (decode at batch 1;
`baseline.launch_bound`: the GPU idle at least half the base trace), and the measured speedup inside the
projection's interval [low, high]."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "docs" / "gpu" / "validation.json"
RUNS = REPO / "docs" / "gpu" / "validation"
DOC = REPO / "docs" / "validation.md"

GPU_BOUND_TARGET = 0.03  # the target |projection error| for GPU-bound workloads
LAUNCH_BOUND_TARGET = 0.06  # ... and for launch-bound ones
REL = 1e-9  # "equal": floats to 9 significant digits (sums may differ in the last bit)


def _committed() -> list[dict]:
    if not DATA.is_file():
        pytest.skip("no committed GPU validation results yet (docs/gpu/validation.json)")
    return json.loads(DATA.read_text())


def _key(r: dict) -> str:
    return json.dumps([r["workload"], r["replacements"], r.get("config")], sort_keys=True)


def _run_dirs() -> list[Path]:
    return sorted(p for p in RUNS.iterdir() if (p / "run.json").is_file()) if RUNS.is_dir() else []


@pytest.fixture(scope="module")
def recomputed() -> dict[str, tuple[str, dict]]:
    """Each committed run directory through `headroom validate --from DIR --json`: {key: (name, result)}."""
    _committed()
    out = {}
    for d in _run_dirs():
        p = subprocess.run(
            [sys.executable, "-m", "headroom.cli", "validate", "--from", str(d), "--json"],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=REPO,
        )
        assert p.returncode == 0, f"headroom validate --from {d}: exit {p.returncode}: {p.stderr[-2000:]}"
        r = json.loads(p.stdout)
        assert r.pop("schema", "").startswith("headroom.validate/")
        out[_key(r)] = (d.name, r)
    return out


def _same(a, b, where: str = "") -> None:
    """`a` equals `b`: the same structure, strings and integers exactly, floats to REL."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert (
            isinstance(a, (int, float))
            and isinstance(b, (int, float))
            and not isinstance(a, bool)
            and not isinstance(b, bool)
        ), f"{where}: {a!r} != {b!r}"
        assert a == pytest.approx(b, rel=REL, abs=1e-12), f"{where}: {a!r} != {b!r}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def test_every_committed_result_is_recomputed_from_its_traces(recomputed):
    results = _committed()
    assert results, "docs/gpu/validation.json is empty"
    assert len(recomputed) == len(results) == len(_run_dirs())
    for r in results:
        assert _key(r) in recomputed, f"no run directory under {RUNS} for {r['workload']} {r['replacements']}"
        name, fresh = recomputed[_key(r)]
        # The headline numbers first, so a failure names them.
        for section, keys in (
            ("measured", ("speedup", "ci", "coverage", "noise", "base_ms", "variant_ms", "rounds")),
            ("projected", ("estimate", "low", "high", "amdahl", "replay", "variant_estimate")),
            ("error", ("estimate", "amdahl", "replay", "variant_estimate")),
        ):
            for k in keys:
                _same(fresh[section][k], r[section][k], f"{name}: {section}.{k}")
        # Then everything else (part, baseline, detail ...): the whole object.
        _same(fresh, r, name)


def test_the_set_covers_launch_bound_training_and_three_workloads():
    results = _committed()
    assert len(results) >= 5
    assert len({r["workload"] for r in results}) >= 3
    assert any(r["baseline"]["launch_bound"] for r in results)
    assert any((r.get("config") or {}).get("mode") == "train" for r in results)
    for r in results:
        assert r["check"]["passed"] and r["measured"]["rounds"] >= 6
        lo, hi = r["measured"]["ci"]
        assert lo <= r["measured"]["speedup"] <= hi


def test_decode_at_batch_one_is_the_launch_bound_regime():
    for r in _committed():
        c = r["config"]
        assert r["baseline"]["launch_bound"] == (c.get("phase") == "decode" and c.get("batch") == 1), r["workload"]


def _rows() -> list[tuple[str, dict]]:
    if not DATA.is_file():
        return []
    return [
        (f"{r['workload']}-{r['config'].get('phase') or r['config'].get('mode')}-{r['replacements'][0]['module']}", r)
        for r in json.loads(DATA.read_text())
    ]


@pytest.mark.parametrize("name,r", _rows(), ids=[n for n, _ in _rows()])
def test_issue_12_targets_hold(name, r):
    """The projection from the variant trace (a diagnostic now): |error| <= 3% (GPU-bound) / 6% (launch-bound)
    against the measurement, now the median of the rounds' ratios (headroom.measure)."""
    m, p, e = r["measured"]["speedup"], r["projected"], r["error"]["variant_estimate"]
    target = LAUNCH_BOUND_TARGET if r["baseline"]["launch_bound"] else GPU_BOUND_TARGET
    assert math.isclose(e, p["variant_estimate"] / m - 1.0, rel_tol=1e-12)
    assert abs(e) <= target, f"{name}: {p['variant_estimate']:.4f}x vs measured {m:.4f}x: {100 * e:+.2f}%"


def test_the_a_priori_estimate_needs_a_conclusive_verify_result():
    """These runs' verify results (2026-12-01, loop/verify.json) were inconclusive but DLRM's, taken with the
    harness of that day (2.45x, serialised; 3.72x on the gated clock since): only DLRM has an a-priori estimate,
    and it misses its interval (verify's error, not the projection's: docs/validation.md)."""
    has = {name: r["projected"]["estimate"] is not None for name, r in _rows()}
    assert [n for n, h in has.items() if h] == ["dlrm-train-InteractionArch"]
    r = dict(_rows())["dlrm-train-InteractionArch"]
    assert r["projected"]["level"] == 0.9 and r["projected"]["source"] == "loop/verify.json"
    assert not r["projected"]["low"] <= r["measured"]["speedup"] <= r["projected"]["high"]


def test_the_launch_bound_calls_cost_what_the_variant_trace_measured():
    """In the launch-bound rows the new call's CPU time is measured (detail.part_cpu), not assumed to be
    an eager single-launch op: the candidates' Triton launches cost 40-50 us per call unprofiled."""
    for r in _committed():
        if not r["baseline"]["launch_bound"]:
            continue
        cpu = r["detail"]["part_cpu"]
        assert cpu["calls"][0] == cpu["calls"][1] > 0
        assert cpu["call_us"] == pytest.approx(cpu["variant_call_us"] / cpu["cpu_speed_ratio"] * cpu["cpu_scale"])
        assert 40.0 <= cpu["call_us"] <= 50.0
        assert cpu["call_us"] < cpu["base_call_us"] * cpu["cpu_scale"]


def test_the_table_in_the_docs_is_the_committed_data():
    from headroom.report.validation import validation_table

    table = validation_table(_committed())
    assert table in DOC.read_text(), (
        "docs/validation.md: regenerate the table with python3 -m headroom.report.validation docs/gpu/validation.json"
    )


def test_the_table_names_the_execution_mode_of_a_row():
    from headroom.report.validation import _config

    eager = {"config": {"phase": "decode", "kv_cache": "static", "batch": 1, "dtype": "bfloat16"}}
    graphs = {"config": {**eager["config"], "graphs": True}}
    compiled = {"config": {**eager["config"], "compile_mode": "reduce-overhead"}}
    assert _config(eager) == "decode, static cache, bs1, bf16"
    assert _config(graphs) == "decode, static cache, bs1, bf16, CUDA graphs"
    assert _config(compiled) == "decode, static cache, bs1, bf16, compiled (reduce-overhead)"
