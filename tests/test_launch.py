"""`headroom profile --nproc 2` on this CPU: two gloo ranks launched by torch's elastic launcher."""

from __future__ import annotations

import gzip
import json
import textwrap

import pytest
from test_profile import invoke

from headroom.errors import UserError
from headroom.jsonio import dumps
from headroom.profile.launch import NCCL_ENV, profile_ranks
from headroom.profile.manifest import MANIFEST_NAME
from headroom.profile.workload import Options
from headroom.projection.sync_projection import SyncModel, sync_projection
from headroom.trace.comm import collectives


def doc(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def check_ranks(result, parallel: str, transfer: str):
    """Two rank traces with one manifest; communication classified; the split adds up."""
    assert [p.name for p in result.traces] == ["rank-0.json.gz", "rank-1.json.gz"]
    # the ranks' own staging directory is gone; manifest.json's lock file stays (filelock)
    assert sorted(p.name for p in result.out_dir.iterdir()) == [
        MANIFEST_NAME,
        MANIFEST_NAME + ".lock",
        "rank-0.json.gz",
        "rank-1.json.gz",
    ]
    manifests = []
    for rank, path in enumerate(result.traces):
        d = doc(path)
        assert d["distributedInfo"]["rank"] == rank and d["distributedInfo"]["world_size"] == 2
        m = d["headroom"]
        dist = m["distributed"]
        assert (dist["rank"], dist["world_size"], dist["backend"], dist["parallel"]) == (rank, 2, "gloo", parallel)
        assert dist["env"] == NCCL_ENV and "elastic_launch" in dist["launcher"]
        assert m["world_size"] == 2 and m["parallel"] == parallel and m["variant"].endswith(f"{parallel}x2")
        manifests.append({k: v for k, v in m.items() if k not in ("distributed", "timing", "date", "trace")})
    assert manifests[0] == manifests[1]  # the same run on both ranks
    entries = json.loads((result.out_dir / MANIFEST_NAME).read_text())["traces"]
    assert sorted(entries) == ["rank-0.json.gz", "rank-1.json.gz"]
    rs = result.ranks
    assert rs.ranks == [0, 1] and rs.backend == "gloo" and rs.parallel == parallel and rs.warnings == []
    for a in rs.analyses:
        ev = a.events
        comm = ev[ev["category"] == "communication"]
        assert transfer in set(comm["name"]) and len(comm) >= 2
        assert (collectives(a)["name"] == transfer).any()
    pr = rs.per_rank
    assert (pr["comm_exposed_us"] <= pr["comm_busy_us"]).all() and (pr["comm_busy_us"] > 0).all()
    # CPU traces keep epoch microseconds (~5e12): float64 resolves ~1e-3 us there, so unions of
    # intervals carry rounding of that order
    assert ((pr["comm_exposed_us"] + pr["comm_overlapped_us"] - pr["comm_busy_us"]).abs() < 0.01).all()
    assert pr["comm_busy_us"].le(pr["comm_us"] + 0.01).all()
    # every rank ran the same collectives, and the synchronised model reproduces the measured step
    assert len(rs.collectives) and rs.collectives.groupby("key")["rank"].nunique().eq(2).all()
    res = sync_projection(SyncModel.from_rank_set(rs))
    assert abs(res.identity_error_us) < 0.01 and res.projected_us == pytest.approx(res.baseline_us, abs=0.01)
    return rs


def test_bert_ddp_on_two_gloo_ranks(gloo_bert_ddp):
    rs = check_ranks(gloo_bert_ddp, "ddp", "gloo:all_reduce")
    # `--json`: each rank's timing in microseconds, as `headroom profile --json` has it (docs/cli.md)
    d = json.loads(dumps(gloo_bert_ddp))
    for rank, path in enumerate(gloo_bert_ddp.traces):
        t, m = d["timing"][str(rank)], doc(path)["headroom"]["timing"]
        assert t["timed"]["n"] == 1 and t["profiled"]["n"] == 2
        assert t["timed"]["median_us"] == pytest.approx(1e3 * m["step_ms"], abs=0.1)  # times_ms keep 4 decimals
        assert t["overhead"] is None and t["overhead_measurable"] is False  # 1 timed step: not measurable
    for a in rs.analyses:  # DDP all-reduces the gradients; the API call that enqueues them is communication too
        assert "c10d::allreduce_" in set(a.events.loc[a.events["category"] == "communication", "name"])


def test_dlrm_shards_its_tables_across_two_gloo_ranks(tmp_path):
    pytest.importorskip("torchrec")
    r = profile_ranks(
        "dlrm", Options(flavour="tiny", batch=64), nproc=2, device="cpu", out=tmp_path, steps=1, warmup=1, timed_steps=1
    )
    rs = check_ranks(r, "torchrec", "gloo:all_to_all")
    info = doc(r.traces[0])["headroom"]["info"]
    assert info["sharding"] == "dmp" and "DistributedModelParallel (2 ranks)" in info["embedding_path"]
    assert set(info["sharding_plan"].values()) == {"table_wise"} and len(info["sharding_plan"]) == 26
    for a in rs.analyses:
        assert "embedding" in set(a.events["category"])


FAILING = textwrap.dedent("""
    import os
    import torch
    from headroom.errors import UserError
    from headroom.profile import Default, Step, WorkloadSpec, parallelize

    def build(cfg, device):
        if os.environ["RANK"] == "1":
            raise UserError("rank 1 has no data for this workload")
        model = parallelize(torch.nn.Linear(8, 8), cfg, device)
        return Step(lambda: model(torch.ones(2, 8)).sum().backward(), model)

    WORKLOAD = WorkloadSpec(
        name="fails-on-rank-1", domain="vision", description="x", model="x", build=build,
        meta_model=lambda flavour: torch.nn.Linear(8, 8, device="meta"), modes=("train",),
        defaults={"mode": Default("train", "x"), "batch": Default(2, "x"), "dtype": Default("fp32", "x")},
        parallel=("ddp",))
""")


def test_a_rank_that_fails_stops_the_run_with_its_one_line(tmp_path):
    wf = tmp_path / "fails.py"
    wf.write_text(FAILING)
    run_dir = tmp_path / "out" / "fails-on-rank-1.train.ddpx2"
    run_dir.mkdir(parents=True)
    (run_dir / "rank-0.json.gz").write_bytes(b"an earlier run")
    with pytest.raises(UserError, match=r"^rank 1 has no data for this workload$"):
        profile_ranks(
            "fails-on-rank-1",
            Options(),
            nproc=2,
            device="cpu",
            out=tmp_path / "out",
            workload_file=wf,
            steps=1,
            warmup=0,
            timed_steps=1,
        )
    # no request, result or error files stay behind, and a failed run replaces no earlier trace
    assert sorted(p.name for p in run_dir.iterdir()) == ["rank-0.json.gz"]
    assert (run_dir / "rank-0.json.gz").read_bytes() == b"an earlier run"


def test_no_timed_steps_is_refused_before_any_launch(tmp_path):
    """`--timed-steps 0` wrote NaN into one-process traces; --nproc refuses it in the parent."""
    with pytest.raises(UserError, match=r"--steps and --timed-steps must be at least 1"):
        profile_ranks("bert-base", Options(mode="train"), nproc=2, device="cpu", out=tmp_path, timed_steps=0)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args, message",
    [
        (["bert-base", "--nproc", "2"], "bert-base: --nproc 2 profiles data-parallel training; an inference replica"),
        (["dlrm", "--nproc", "2", "--parallel", "fsdp"], "dlrm: --parallel fsdp is not supported; use torchrec"),
        (["bert-base", "--mode", "train", "--parallel", "ddp"], "--parallel ddp needs --nproc 2 or more"),
        (["bert-base", "--mode", "train", "--nproc", "0"], "--nproc must be at least 1"),
    ],
)
def test_bad_multi_rank_options_are_one_line_before_any_launch(tmp_path, args, message):
    code, out, _ = invoke(["profile", *args, "--device", "cpu", "--out", str(tmp_path)])
    assert code == 2 and message in out and len(out.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing launched, nothing written


def test_dlrm_sharding_options_with_several_ranks():
    """Checked when the ranks build (a bad one comes back as one line, as above)."""
    pytest.importorskip("torchrec")
    import torch

    from headroom.profile.registry import get_workload
    from headroom.workloads.dlrm import resolve_sharding

    spec = get_workload("dlrm")
    cfg = spec.resolve(Options(nproc=2, flavour="tiny"), "cpu")
    assert (cfg.world_size, cfg.parallel) == (2, "torchrec")
    assert resolve_sharding(cfg, torch.device("cpu")) == ("dmp", "CPU")  # auto: sharded
    for extra, message in (
        ({"sharding": "none"}, "drop --opt sharding=none"),
        ({"shard": "row_wise"}, "needs CUDA"),
        ({"shard": "diagonal"}, "--opt shard must be auto, table_wise, row_wise"),
    ):
        bad = spec.resolve(Options(nproc=2, flavour="tiny", extra=extra), "cpu")
        with pytest.raises(UserError, match=message):
            resolve_sharding(bad, torch.device("cpu"))


def test_cli_nproc_json_and_a_quiet_stderr(tmp_path):
    """`headroom profile --nproc 2 --json`: one `headroom.profile.ranks/1` document on stdout; on stderr the
    ranks' stage lines, and none of Kineto's `USDT: ... profiler_start` lines."""
    import subprocess
    import sys
    from pathlib import Path

    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "headroom.cli",
            "profile",
            "bert-base",
            "--mode",
            "train",
            "--flavour",
            "tiny",
            "--batch",
            "2",
            "--seq",
            "32",
            "--nproc",
            "2",
            "--device",
            "cpu",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--timed-steps",
            "1",
            "--out",
            str(tmp_path),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    assert d["schema"] == "headroom.profile.ranks/1" and d["analysis"]["kind"] == "ranks"
    assert sorted(d["timing"]) == ["0", "1"] and d["timing"]["1"]["timed"]["median_us"] > 0
    assert "USDT:" not in p.stderr and "profiler_start" not in p.stderr
    assert "rank 0: profiling" in p.stderr and "Traceback" not in p.stderr
