"""lab/gpu/gpu_validate.py's a-priori rerun pieces: the GPU clock samples lined up with validate's
interleaved blocks, the L2-state probe (on a CPU), and its refusal of unknown rows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headroom.pyfile import import_file

REPO = Path(__file__).resolve().parents[1]
script = import_file(REPO / "lab" / "gpu" / "gpu_validate.py", "gpu_validate_apriori")


def _stamp(t: float) -> str:
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(int(t))) + f".{int(round((t % 1) * 1000)):03d}"


def test_clock_samples_are_averaged_over_each_sides_blocks(tmp_path):
    t0 = 1_800_000_000.0
    lines = [
        f"{_stamp(t0 + 0.1 * i)}, {1980 if i < 10 else 1830}, 3201, {500 if i < 10 else 690}.5, 60" for i in range(20)
    ] + ["garbage", "1, 2"]
    samples = script.clock_samples("\n".join(lines))
    assert len(samples) == 20 and samples[3][1:] == (1980.0, 3201.0, 500.5, 60.0)
    assert abs(samples[3][0] - (t0 + 0.3)) < 1e-6
    w = script.window_stats(samples, t0 + 1.0, t0 + 1.95)
    assert w == {"n": 10, "sm_mhz": 1830.0, "mem_mhz": 3201.0, "power_w": 690.5, "temp_c": 60.0}
    assert script.window_stats(samples, t0 + 5, t0 + 6) is None

    class Fake:
        def window(self, a, b):
            return script.window_stats(samples, a, b)

    run = tmp_path / "run.json"
    run.write_text(
        json.dumps(
            {
                "timing": {
                    "rounds": [
                        {"order": ["base", "variant"], "base_t": [t0, t0 + 0.45], "variant_t": [t0 + 1.0, t0 + 1.45]},
                        {
                            "order": ["variant", "base"],
                            "variant_t": [t0 + 1.5, t0 + 1.95],
                            "base_t": [t0 + 0.5, t0 + 0.95],
                        },
                    ]
                }
            }
        )
    )
    sides = script.side_clocks(run, Fake())
    assert sides == {
        "base": {"sm_mhz": 1980.0, "power_w": 500.5, "temp_c": 60.0, "n": 10},
        "variant": {"sm_mhz": 1830.0, "power_w": 690.5, "temp_c": 60.0, "n": 10},
    }


def test_validate_blocks_carry_their_wall_clock_span():
    torch = pytest.importorskip("torch")
    from headroom.validate.timing import interleave

    sides = []
    before = time.time()
    t = interleave(lambda: sum(range(2000)), sides.append, torch.device("cpu"), rounds=7, k=2)
    for r in t["rounds"]:
        for side in ("base", "variant"):
            a, b = r[f"{side}_t"]
            assert before - 1 <= a <= b <= time.time() + 1
        first, second = r["order"]
        assert r[f"{first}_t"][1] <= r[f"{second}_t"][0] + 1e-3


PROBLEM = """
import torch
from torch import nn

PARAM_DTYPE = torch.float64


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        for p in self.parameters():
            p.data = p.data.to(PARAM_DTYPE)

    def forward(self, x):
        return x * self.weight


def get_inputs():
    return [torch.randn(64, 32, dtype=torch.float64)]


def get_init_inputs():
    return [32]
"""

CANDIDATE = """
import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return (x * self.weight).to(x.dtype)
"""


def test_the_l2_probe_times_both_forwards_in_every_state(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "p.py").write_text(PROBLEM)
    (tmp_path / "c.py").write_text(CANDIDATE)
    res = script.l2_probe(tmp_path / "p.py", tmp_path / "c.py", "cpu", time.monotonic() + 120)
    assert res["input_bytes"] == 64 * 32 * 8 and res["ring"] >= 2
    assert set(res["us"]) == {"cold", "produced", "produced_gemm", "kernelbench_params"}
    for state in ("cold", "produced", "produced_gemm"):
        r = res["us"][state]
        assert r["reference"] > 0 and r["candidate"] > 0
        assert r["speedup"] == pytest.approx(r["reference"] / r["candidate"], rel=1e-3)


def test_unknown_rows_are_refused_with_one_line():
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "lab" / "gpu" / "gpu_validate.py"),
            "--apriori",
            "--dry-run",
            "--only",
            "no-such-row",
            "--out",
            "/tmp/unused-apriori",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no-such-row" in p.stderr


def test_the_cpu_probe_reads_a_rows_options_and_refuses_unknown_rows():
    assert script._options(["--phase", "decode", "--batch", "1"]) == {"phase": "decode", "batch": 1}
    assert script._options([]) == {}
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "lab" / "gpu" / "gpu_validate.py"),
            "--cpu-probe",
            "--dry-run",
            "--only",
            "no-such-row",
            "--out",
            "/tmp/unused-cpu-probe",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no-such-row" in p.stderr
