"""The classify/annotate/report commands as a user runs them: exit codes, one-line errors, JSON contract."""

import gzip
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import HTA_TRACES, REPO, hta_trace


def headroom(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "headroom.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        **kw,
    )


def test_classify_json_contract_on_real_trace():
    p = headroom("classify", "--json", "--all", hta_trace("nccl_parser_config"))
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    for key in ("total_us", "busy_us", "idle_us", "wall_us", "addressable_fraction", "categories", "kernels"):
        assert key in d
    cats = {c["name"]: c for c in d["categories"]}
    assert cats["communication"]["addressable"] is False and cats["normalization"]["addressable"] is True
    assert sum(c["us"] for c in d["categories"]) == pytest.approx(d["total_us"])
    assert sum(k["us"] for k in d["kernels"]) == pytest.approx(d["total_us"])
    assert d["device"].startswith("NVIDIA A100")


def test_classify_table_names_categories():
    p = headroom("classify", hta_trace("amd_trace"))
    assert p.returncode == 0, p.stderr
    assert "gemm" in p.stdout and "addressable: 54.1%" in p.stdout


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"", "empty file"),
        (b'{"traceEvents": [', "invalid JSON"),
        (b"[]", "not a Kineto trace"),
        (b'{"traceEvents": []}', "nothing to analyse"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, content, needle):
    f = tmp_path / "t.json"
    f.write_bytes(content)
    p = headroom("classify", f)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and str(f) in lines[0]
    assert "Traceback" not in p.stderr


def test_missing_file_and_truncated_gzip(tmp_path):
    p = headroom("classify", tmp_path / "missing.json")
    assert p.returncode == 2 and "no such file" in p.stderr and "Traceback" not in p.stderr
    f = tmp_path / "t.json.gz"
    f.write_bytes(gzip.compress(b'{"traceEvents": []}' * 100)[:40])
    p = headroom("classify", f)
    assert p.returncode == 2 and "gzip" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_bad_rules_file_is_one_line(tmp_path):
    r = tmp_path / "r.toml"
    r.write_text('[[rule]]\ncategory = "gemm"\nkernel = "("\n')
    p = headroom("classify", "--rules", r, hta_trace("base__base"))
    assert p.returncode == 2 and "rule 1: kernel: bad regex '('" in p.stderr and "Traceback" not in p.stderr


def test_cpu_only_trace_is_not_an_error():
    p = headroom("classify", "--json", hta_trace("cpu_only"))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["mode"] == "cpu-ops"


def test_annotate_writes_categories_into_args(tmp_path):
    out = tmp_path / "annotated.json.gz"
    p = headroom("annotate", hta_trace("nccl_parser_config"), "-o", out)
    assert p.returncode == 0, p.stderr
    doc = json.loads(gzip.decompress(out.read_bytes()))
    gpu = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len(gpu) == 3774 and all("headroom_category" in e["args"] for e in gpu)
    nccl = [e for e in gpu if e["name"].startswith("ncclKernel")]
    assert {e["args"]["headroom_category"] for e in nccl} == {"communication"}
    assert not list(tmp_path.glob(".*.tmp"))


def test_report_over_a_directory():
    if not HTA_TRACES.exists():
        pytest.skip("no shared traces")
    p = headroom("report", "--json", HTA_TRACES)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema"] == "headroom.report/1" and doc["failed"] == []
    rows = {r["workload"]: r for r in doc["traces"]}
    assert len(rows) == 6
    assert rows["triton_example__triton_example"]["addressable_fraction"] == 1.0
    assert rows["nccl_parser_config__nccl_data"]["top_addressable_op"] == "aten::cudnn_batch_norm_backward"


@pytest.mark.parametrize(
    "args",
    [
        ["classify", "--json"],
        # the same guarantee for the other commands: make test-slow
        pytest.param(["project", "--json", "-s", "category:addressable=2"], marks=pytest.mark.slow),
        pytest.param(["targets", "--json"], marks=pytest.mark.slow),
    ],
)
def test_every_command_prints_the_same_from_the_cache(tmp_path, args):
    """The second command on a trace reads its analysis (and, when used, its tables) from the cache:
    the same output as without the cache, for one trace and for a directory of ranks."""
    from tests.ranks_synthetic import write_pair

    ranks = write_pair(tmp_path / "ranks")
    one = tmp_path / "one.json.gz"
    one.write_bytes((REPO / "traces" / "resnet-50.train.json.gz").read_bytes())
    env = dict(
        os.environ, HEADROOM_CACHE_DIR=str(tmp_path / "cache"), HEADROOM_CACHE_MIN_BYTES="0", HEADROOM_REPLAY="off"
    )  # the analysis read back, not the output replayed (tests/test_cli_replay.py)
    for target in (one, ranks):
        fresh = headroom(*args, "--no-cache", target, env=env)
        headroom(*args, target, env=env)  # fills the cache
        cached = headroom(*args, target, env=env)
        assert fresh.returncode == cached.returncode == 0, cached.stderr
        assert cached.stdout == fresh.stdout and len(cached.stdout) > 300
    assert len(list((tmp_path / "cache").glob("*/*/analysis-*.frames"))) == 3  # one trace, two ranks


def test_a_kernel_run_once_in_three_steps_is_not_shown_as_x0(builder, tmp_path):
    for n, t0 in ((1, 0.0), (2, 100.0), (3, 200.0)):
        builder.step(n, t0, 100.0)
        builder.kernel("sm90_gemm", launch_ts=t0 + 2, ts=t0 + 10, dur=50)
    builder.kernel("vectorized_elementwise_kernel", launch_ts=5.0, ts=70.0, dur=3)  # in step 1 only
    p = headroom("classify", "--all", builder.write(tmp_path / "t.json"))
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if "vectorized_elementwise_kernel" in ln)
    assert " x0.333 " in line and " x0 " not in line
    assert any(" x1 " in ln for ln in p.stdout.splitlines() if "sm90_gemm" in ln)
