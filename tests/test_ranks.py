"""headroom.trace.rank_set: the ranks of one run analysed together, on traces with a known answer."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from headroom.errors import UserError
from headroom.trace.analysis import analyze, analyze_path
from headroom.trace.comm import activity_segments, collectives, comm_split
from headroom.trace.rank_set import rank_id, rank_order, rank_set, repeated_ranks
from tests.conftest import TraceBuilder, hta_trace
from tests.ranks_synthetic import DELAY, GEMM, NCCL, SHIFT, STEP, WALL, write_pair


@pytest.fixture
def pair(tmp_path):
    return rank_set(analyze_path(write_pair(tmp_path / "ranks")))


def test_per_rank_split_waits_and_straggler(pair):
    pr = pair.per_rank.set_index("rank")
    assert pair.ranks == [0, 1] and pair.world_size == 2 and pair.backend == "nccl"
    assert pr["wall_us"].tolist() == [WALL, WALL] and pr["step_us"].tolist() == [WALL / 2, WALL / 2]
    assert pr["busy_us"].tolist() == [5000.0, 5000.0] and pr["idle_us"].tolist() == [510.0, 510.0]
    # rank 0 waits 500 us per step with nothing to run for half of it; rank 1's all-reduce hides behind compute
    assert pr["compute_busy_us"].tolist() == [4000.0, 5000.0]
    assert pr["comm_busy_us"].tolist() == [2000.0, 1000.0]
    assert pr["comm_overlapped_us"].tolist() == [1000.0, 1000.0]
    assert pr["comm_exposed_us"].tolist() == [1000.0, 0.0]
    assert pr["comm_overlap_fraction"].tolist() == [0.5, 1.0]
    assert pr["wait_us"].tolist() == [2 * DELAY, 0.0]
    assert pr["waited_for_us"].tolist() == [0.0, 2 * DELAY]
    assert pair.slowest_rank == 1 and pair.step_us == WALL / 2
    # the other host's clock is read on rank 0's: collectives end together
    assert pair.offsets == {0: 0.0, 1: -SHIFT}
    assert pair.collectives["key"].nunique() == 2 and pair.warnings == []


def test_categories_across_ranks(pair):
    c = pair.categories.set_index("name")
    assert c.loc["gemm", ["min_us", "median_us", "max_us", "max_rank"]].tolist() == [2000.0, 2500.0, 3000.0, 1]
    assert c.loc["gemm", ["min_fraction", "max_fraction"]].tolist() == pytest.approx([1 / 3, 0.5])
    assert c.loc["communication", ["min_us", "max_us", "max_rank"]].tolist() == [1000.0, 2000.0, 0]
    assert c.loc["optimizer", ["min_us", "max_us"]].tolist() == [1000.0, 1000.0]
    assert list(c.index[:2]) == ["gemm", "communication"]  # by median time
    steps = pair.steps
    assert steps["step"].tolist() == [1, 2] and steps["max_us"].tolist() == [2510.0, 2510.0]


def test_to_dict_is_the_classify_json_contract(pair):
    d = json.loads(json.dumps(pair.to_dict()))
    assert d["kind"] == "ranks" and d["ranks"] == [0, 1] and d["slowest_rank"] == 1 and d["collectives"] == 2
    assert [r["comm_exposed_us"] for r in d["per_rank"]] == [1000.0, 0.0]
    assert [a["trace"].rsplit("/", 1)[-1] for a in d["rank_analyses"]] == ["rank-0.json.gz", "rank-1.json.gz"]


def test_delay_moves_the_waits(tmp_path):
    """Exposed communication and waits follow the delay exactly."""
    for delay in (0.0, 200.0):
        rs = rank_set(analyze_path(write_pair(tmp_path / f"d{delay:g}", delay=delay)))
        pr = rs.per_rank.set_index("rank")
        assert pr.loc[0, "wait_us"] == 2 * delay
        assert pr.loc[0, "comm_exposed_us"] == 2 * delay  # rank 0 idles while it waits...
        assert pr.loc[1, "comm_exposed_us"] == 0.0
        assert pr.loc[0, "comm_busy_us"] == 2 * (500.0 + delay)  # ...inside its longer all-reduce
        assert pr.loc[1, "waited_for_us"] == 2 * delay
        assert rs.step_us == (STEP + max(2400.0, 2010.0 + delay)) / 2  # (the CPU step ends at 2400)


def test_cpu_only_exclusive_segments_and_split(tmp_path):
    """gloo: the transfer runs on a worker thread; the main thread only enqueues it (c10d::allreduce_)."""
    b = TraceBuilder(pid=1, tid=1)
    b.step(1, 0.0, 1000.0)
    b.cpu("aten::mm", 0.0, 400.0)
    b.cpu("aten::copy_", 100.0, 100.0)  # a child: aten::mm runs [0,100] and [200,400]
    b.cpu("c10d::allreduce_", 400.0, 20.0)
    b.cpu("gloo:all_reduce", 420.0, 380.0, cat="user_annotation", tid=2)
    b.cpu("aten::mul", 500.0, 100.0, tid=3)  # compute beside the transfer
    b.cpu("aten::add", 800.0, 100.0)
    a = analyze(b.write(tmp_path / "rank-0.json", distributedInfo={"rank": 0, "world_size": 2}))
    assert a.mode == "cpu-ops"
    seg = activity_segments(a)
    names = a.events["name"].to_numpy()
    got = sorted((names[e], s, t) for e, s, t in zip(seg["event"], seg["ts"], seg["end"]))
    assert got == [
        ("aten::add", 800.0, 900.0),
        ("aten::copy_", 100.0, 200.0),
        ("aten::mm", 0.0, 100.0),
        ("aten::mm", 200.0, 400.0),
        ("aten::mul", 500.0, 600.0),
        ("c10d::allreduce_", 400.0, 420.0),
        ("gloo:all_reduce", 420.0, 800.0),
    ]
    s = comm_split(a)
    assert (s.comm_us, s.comm_busy_us, s.overlapped_us, s.exposed_us, s.compute_busy_us) == (400, 400, 100, 300, 600)
    assert collectives(a)["name"].tolist() == ["gloo:all_reduce"]  # the enqueue is not a collective


@pytest.mark.parametrize(
    "name, rank",
    [
        ("rank-3.json.gz", 3),
        ("rank12_trace.json", 12),
        ("trace_rank_5.json", 5),
        ("cpu_only__rank-34.Jul_15.pt.trace.json.gz", 34),
        ("host_1234.1700000000.pt.trace.json", None),
        ("frank7.json", None),
    ],
)
def test_rank_from_the_file_name(tmp_path, builder, name, rank):
    builder.step(1, 0.0, 10.0)
    builder.kernel(GEMM, 1.0, 2.0, 5.0)
    rid = rank_id(analyze(builder.write(tmp_path / name)))
    assert (rid.rank if rid else None) == rank
    if rid:
        assert rid.source == "file name"


def test_distributed_info_wins_and_sets_that_are_not_ranks(tmp_path):
    d = write_pair(tmp_path / "swapped", names=("rank-1.json.gz", "rank-0.json.gz"))  # names lie: info wins
    rs = rank_set(analyze_path(d))
    assert [rank_id(a).source for a in rs.analyses] == ["distributedInfo"] * 2
    assert rs.analysis(1).source.endswith("rank-0.json.gz")
    # one-rank process groups (torchrec DMP on one GPU) are single traces, however many
    one = tmp_path / "one"
    one.mkdir()
    for i in range(2):
        b = TraceBuilder()
        b.step(1, 0.0, 10.0)
        b.kernel(GEMM, 1.0, 2.0, 5.0)
        b.write(one / f"t{i}.json", distributedInfo={"rank": 0, "world_size": 1})
    assert rank_order(analyze_path(one)) is None and repeated_ranks(analyze_path(one)) == {}
    # the same rank twice: not a rank set, and said so
    twice = tmp_path / "twice"
    twice.mkdir()
    src = hta_trace("timeline_analysis")  # a real trace: rank 0 of 128 (recommender, NCCL send/recv)
    for n in ("a.json.gz", "b.json.gz"):
        shutil.copy(src, twice / n)
    an = analyze_path(twice)
    assert rank_id(an[0]).rank == 0 and rank_id(an[0]).world_size == 128
    assert rank_order(an) is None and repeated_ranks(an) == {0: ["a.json.gz", "b.json.gz"]}
    with pytest.raises(UserError, match="not the ranks of one run"):
        rank_set(an)


@pytest.mark.parametrize("layout", ["torchtitan", "hf_trainer", "lightning"])
def test_traces_from_elsewhere(tmp_path, pair, layout):
    """torchtitan: rank0_trace.json (no rank in the trace needed); HF Trainer (tensorboard_trace_handler):
    host_pid.time.pt.trace.json, the rank only in distributedInfo; Lightning: stage-action-local_rank."""
    names = {
        "torchtitan": ("rank0_trace.json", "rank1_trace.json"),
        "hf_trainer": ("node7_4242.1700000000123.pt.trace.json", "node7_4243.1700000000456.pt.trace.json"),
        "lightning": ("fit-training_step-0.1700000000.pt.trace.json", "fit-training_step-1.1700000001.pt.trace.json"),
    }[layout]
    d = write_pair(tmp_path / layout, names=names, distributed_info=layout != "torchtitan")
    rs = rank_set(analyze_path(d))
    assert rs.ranks == [0, 1]
    cols = ["comm_exposed_us", "wait_us", "waited_for_us", "step_us"]
    assert rs.per_rank[cols].equals(pair.per_rank[cols])


def test_unpaired_collectives_are_left_out(tmp_path):
    d = write_pair(tmp_path / "r")
    path = d / "rank-1.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    extra = {
        "ph": "X",
        "cat": "kernel",
        "name": NCCL,
        "pid": 0,
        "tid": 20,
        "ts": SHIFT + 2800.0,
        "dur": 10.0,
        "args": {"device": 0, "stream": 20, "correlation": 99999},
    }
    doc["traceEvents"].append(extra)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    rs = rank_set(analyze_path(d, whole_trace=True))
    assert len(rs.collectives) == 0 and rs.warnings == [
        f"collective {NCCL[:80]!r} ran a different number of times per rank (rank 0: 2, rank 1: 3): not paired across ranks"
    ]
    assert rs.per_rank["wait_us"].tolist() == [0.0, 0.0]
