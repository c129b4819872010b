"""headroom.projection.sync_projection: speedups projected per rank, then through the collectives (known answers).

The traces (tests/ranks_synthetic.py): rank 1's gemm is 500 us longer, so rank 0 waits for it at
every all-reduce. Step window 5510 us (two steps); worked by hand:

* gemm 2x on rank 0 only: rank 0 arrives earlier and waits longer; nothing changes (gain 0), though
  rank 0 alone would promise 1000/5510;
* gemm 2x on rank 1 only: rank 1 arrives 250 us before rank 0, so the all-reduce ends 500 us earlier
  each step: 1000/5510;
* gemm 2x on both: rank 1 is the last to arrive, 750 us earlier each step: 1500/5510;
* gemm at zero time on rank 1 only: now rank 0 is the one waited for: still 1000/5510;
* gemm at zero time on both: the all-reduce starts at once, 1500 us earlier each step: 3000/5510.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from headroom.cli.app import app, register_commands
from headroom.errors import UserError
from headroom.jsonio import plain
from headroom.projection.speedups import parse_cli_speedup
from headroom.projection.sync_projection import SyncModel, project_ranks, sync_projection
from headroom.projection.sync_targets import sync_targets
from headroom.trace.analysis import analyze_path
from headroom.trace.rank_set import rank_set
from tests.ranks_synthetic import ELEMENTWISE, GEMM, OPTIMIZER, WALL, write_pair


@pytest.fixture
def pair(tmp_path):
    return rank_set(analyze_path(write_pair(tmp_path / "ranks")))


def gemm_factors(rs, on, factor):
    return {
        r: np.where((a.events["name"] == GEMM).to_numpy() & (r in on), factor, 1.0)
        for r, a in zip(rs.ranks, rs.analyses)
    }


@pytest.mark.parametrize(
    "on, factor, saved",
    [((0,), 2.0, 0.0), ((1,), 2.0, 1000.0), ((0, 1), 2.0, 1500.0), ((1,), np.inf, 1000.0), ((0, 1), np.inf, 3000.0)],
)
def test_speedup_through_the_collectives(pair, on, factor, saved):
    model = SyncModel.from_rank_set(pair)
    res = sync_projection(model, gemm_factors(pair, on, factor))
    assert res.identity_error_us == 0.0 and res.baseline_us == WALL
    assert res.projected_us == pytest.approx(WALL - saved, abs=1e-6)
    # every rank finishes the step together: the collectives hold the faster one back
    assert [p for _, p in res.per_rank.values()] == pytest.approx([WALL - saved] * 2, abs=1e-6)


def test_project_ranks_against_one_rank_amdahl(pair):
    e = [parse_cli_speedup(f"kernel:{GEMM}=2")]
    straggler_not = project_ranks(pair, e, on_ranks=[0])
    assert straggler_not.speedups.gain == 0.0
    assert straggler_not.per_rank_amdahl[0]["gain"] == pytest.approx(1000.0 / WALL)  # what one rank promises
    assert straggler_not.zero_time.gain == 0.0
    straggler = project_ranks(pair, e, on_ranks=[1])
    assert straggler.speedups.gain == pytest.approx(1000.0 / WALL)
    assert straggler.zero_time.gain == pytest.approx(1000.0 / WALL)  # then rank 0 is the one waited for
    both = project_ranks(pair, e)
    assert both.on_ranks == [0, 1] and both.speedups.gain == pytest.approx(1500.0 / WALL)
    d = json.loads(json.dumps(plain(both)))
    assert d["synchronised"]["speedups"]["per_step_us"] == pytest.approx((WALL - 1500.0) / 2)
    assert d["per_rank_amdahl"][1]["gain"] == pytest.approx(1500.0 / WALL)


def test_targets_rank_by_the_synchronised_step(pair):
    t = sync_targets(pair, speedup=2.0, by=("kernel",))
    rows = t.set_index("name")
    assert t["name"].tolist()[:2] == [GEMM, OPTIMIZER]
    assert rows.loc[GEMM, "gain"] == pytest.approx(1500.0 / WALL)
    assert rows.loc[OPTIMIZER, "gain"] == pytest.approx(500.0 / WALL)  # the tail after the all-reduce
    # the elementwise kernels run while the ranks wait anyway: worth nothing, though each rank alone
    # promises 4.5% (its wall share: half of each 500 us, split with the all-reduce beside it, halved)
    assert rows.loc[ELEMENTWISE, "gain"] == pytest.approx(0.0, abs=1e-9)
    assert rows.loc[ELEMENTWISE, "rank_gain_median"] == pytest.approx(250.0 / WALL)
    assert "communication" not in set(t["category"])
    assert rows.loc[GEMM, ["min_rank_us", "max_rank_us"]].tolist() == [2000.0, 3000.0]


def invoke(args):
    """Like `headroom.cli.main`: a UserError is one line on stderr and exit 2."""
    register_commands()
    r = CliRunner().invoke(app, args)
    if isinstance(r.exception, UserError):
        return 2, f"headroom: error: {r.exception}"
    return r.exit_code, r.output


def test_cli_on_a_directory_of_ranks(tmp_path):
    d = str(write_pair(tmp_path / "ranks"))
    code, out = invoke(["classify", d, "--json"])
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "headroom.classify.ranks/1"
    assert doc["kind"] == "ranks" and doc["slowest_rank"] == 1
    assert [r["wait_us"] for r in doc["per_rank"]] == [1000.0, 0.0]
    code, out = invoke(["project", d, "-s", f"kernel:{GEMM}=2", "--on-rank", "0", "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "headroom.project.ranks/1"
    assert doc["synchronised"]["speedups"]["gain"] == 0.0
    code, out = invoke(["targets", d, "-s", "2", "--by", "kernel", "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "headroom.targets.ranks/1" and doc["targets"][0]["name"] == GEMM
    code, out = invoke(["report", d, "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["schema"] == "headroom.report/1" and doc["traces"] == [] and doc["failed"] == []
    (rs,) = doc["rank_sets"]
    assert rs["kind"] == "ranks" and rs["slowest_rank"] == 1 and rs["source"] == d
    assert [r["wait_us"] for r in rs["ranks"]] == [1000.0, 0.0]
    assert [r["rank"] for r in rs["ranks"]] == [0, 1] and rs["step_us"] == pytest.approx(WALL / 2)
    code, out = invoke(["classify", d])
    assert code == 0 and "slowest rank 1: the others waited 1.00 ms for it at 2 collectives" in out


def test_cli_bad_rank_input(tmp_path):
    d = str(write_pair(tmp_path / "ranks"))
    code, out = invoke(["project", d, "-s", f"kernel:{GEMM}=2", "--on-rank", "5"])
    assert code == 2 and "--on-rank 5: not a rank here (ranks: 0, 1)" in out
    code, out = invoke(["project", f"{d}/rank-0.json.gz", "-s", f"kernel:{GEMM}=2", "--on-rank", "0"])
    assert code == 2 and "is one trace, not a directory of ranks" in out
    code, out = invoke(["project", d, "--win-rate", "0.5", "--median", "1.5"])
    assert code == 2 and "a directory of ranks takes --speedup/--speedups" in out


def test_a_directory_of_unrelated_traces_reads_as_before(tmp_path):
    """No ranks in the traces: each one on its own, exactly as given one by one."""
    d = write_pair(tmp_path / "plain", names=("a.json.gz", "b.json.gz"), distributed_info=False)
    code, together = invoke(["classify", str(d), "--json"])
    one = [invoke(["classify", str(d / n), "--json"])[1] for n in ("a.json.gz", "b.json.gz")]
    assert code == 0 and together == "".join(one) and len(together.splitlines()) == 2


def test_collectives_taken_in_another_order_by_another_rank(tmp_path):
    """gloo runs collectives on two worker threads, and ranks need not give the same one to the same
    thread: here rank 1 finishes the second all-reduce long before the first. With no speedup the model
    is still the measurement, and a faster gemm still reaches the step through both."""
    from tests.conftest import TraceBuilder
    from tests.ranks_synthetic import NCCL

    d = tmp_path / "order"
    d.mkdir()
    for rank, (first, second) in enumerate(
        [((100.0, 100.0, 20), (200.0, 100.0, 20)), ((100.0, 190.0, 20), (120.0, 10.0, 21))]
    ):
        b = TraceBuilder(pid=100 + rank, tid=100 + rank)
        b.step(1, 0.0, 300.0)
        b.kernel(GEMM, 1.0, 10.0, 90.0, stream=7)
        for ts, dur, stream in (first, second):
            b.kernel(NCCL, 2.0, ts, dur, stream=stream)
        b.kernel(OPTIMIZER, 3.0, 300.0, 50.0, stream=7)
        b.write(d / f"rank-{rank}.json.gz", distributedInfo={"rank": rank, "world_size": 2})
    rs = rank_set(analyze_path(d))
    model = SyncModel.from_rank_set(rs)
    assert model.order == [f"{NCCL}#1", f"{NCCL}#0"]  # taken by their (median) end
    res = sync_projection(model)
    assert res.identity_error_us == 0.0 and res.baseline_us == 350.0
    faster = sync_projection(model, gemm_factors(rs, (0, 1), 2.0))
    assert faster.projected_us == pytest.approx(350.0 - 45.0)


def test_the_facade_takes_a_directory_of_ranks(tmp_path):
    import headroom

    d = write_pair(tmp_path / "ranks")
    rs = headroom.analyze_ranks(d)
    assert isinstance(rs, headroom.RankSet) and rs.slowest_rank == 1
    res = headroom.project_ranks(d, speedup=[f"kernel:{GEMM}=2"], on_ranks=[1])
    assert res.speedups.gain == pytest.approx(1000.0 / WALL)


@pytest.fixture
def headroom_cli(headroom):
    """`headroom ARGS...` in this process: exit code, stdout, stderr lines."""

    def call(*args):
        p = headroom(*args)
        return p.returncode, p.stdout, [ln for ln in p.stderr.splitlines() if ln]

    return call


def test_a_rank_that_cannot_be_read_is_named_and_the_others_reported(tmp_path, headroom_cli):
    """A directory of ranks with a corrupt rank: the bad file on stderr, the good rank as a trace of its
    own (not a rank set of one), a warning that says so, and exit 2 at the end."""
    d = write_pair(tmp_path / "ranks")
    (d / "rank-1.json.gz").write_bytes(b"not gzip")
    code, out, err = headroom_cli("classify", "--json", d)
    assert code == 2
    (doc,) = [json.loads(ln) for ln in out.splitlines()]
    assert doc["schema"] == "headroom.classify/1" and doc["trace"] == str(d / "rank-0.json.gz")
    assert [ln.split(": ")[1] for ln in err] == ["error", "warning"]
    assert str(d / "rank-1.json.gz") in err[0]
    assert err[1] == (
        f"headroom: warning: {d}: 1 trace(s) could not be read: the other 1 analysed one "
        f"by one, not as the ranks of one run"
    )
    # a directory of unrelated traces was never a rank set: only the error
    plain = write_pair(tmp_path / "plain", names=("a.json.gz", "b.json.gz"), distributed_info=False)
    (plain / "b.json.gz").write_bytes(b"not gzip")
    code, out, err = headroom_cli("classify", "--json", plain)
    assert code == 2 and len(out.splitlines()) == 1 and len(err) == 1 and err[0].startswith("headroom: error: ")


def test_report_takes_traces_and_rank_sets_together(tmp_path, headroom_cli):
    d = write_pair(tmp_path / "ranks")
    one = write_pair(tmp_path / "single", names=("a.json.gz", "b.json.gz"), distributed_info=False) / "a.json.gz"
    code, out, err = headroom_cli("report", "--json", one, d)
    assert code == 0 and err == []
    doc = json.loads(out)
    assert [r["trace"] for r in doc["traces"]] == [str(one)]
    assert [(s["source"], [r["rank"] for r in s["ranks"]]) for s in doc["rank_sets"]] == [(str(d), [0, 1])]
    code, out, err = headroom_cli("report", one, d)  # on screen: the summary, then the rank set
    assert code == 0 and out.index("a ") < out.index(f"{d}  2 ranks") and "waited ms/step" in out
    # rank 0 waits 500 us per step at the all-reduce: 0.50 ms/step (1.00 ms over the two steps)
    row = next(
        ln
        for ln in out.splitlines()[
            out.splitlines().index(next(ln for ln in out.splitlines() if ln.startswith(f"{d}  2 ranks"))) :
        ]
        if ln.lstrip().startswith("0 ")
    )
    assert " 0.50 " in row and " 1.00 " not in row


def test_rank_projection_warnings_go_to_stderr(tmp_path, headroom_cli):
    d = write_pair(tmp_path / "ranks")
    code, out, err = headroom_cli("project", d, "-s", f"kernel:{GEMM}=2", "-s", "kernel:no_such_kernel=2")
    assert code == 0 and "headroom: warning" not in out and "synchronised step" in out
    assert err == [
        f"headroom: warning: {d}: rank 0: kernel:no_such_kernel=2 (command line) matches no kernel in this trace",
        f"headroom: warning: {d}: rank 1: kernel:no_such_kernel=2 (command line) matches no kernel in this trace",
    ]
