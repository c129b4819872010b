"""--engine ray (headroom.fleet): the same bytes as one process, a lost worker's candidate retried and counted
once, and ray imported only when asked for. One local Ray cluster (2 CPUs, a 500 MB object store) for the
module."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headroom.cli.app import app, register_commands
from headroom.errors import UserError
from tests.ranks_synthetic import write_pair

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "traces"
CHEATERS = REPO / "tests" / "cheaters"

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, object_store_memory=500 * 2**20, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def invoke(args):
    register_commands()
    r = CliRunner().invoke(app, args)
    if isinstance(r.exception, UserError):
        return 2, "", f"headroom: error: {r.exception}"
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def rank_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    ranks = write_pair(root / "ranks")
    broken = write_pair(root / "broken")  # a rank that cannot be read: the other analysed alone, exit 2
    (broken / "rank-1.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", '))
    repeated = root / "repeated"  # rank 0 twice: analysed one by one (products computed again)
    repeated.mkdir()
    shutil.copy(ranks / "rank-0.json.gz", repeated / "a.json.gz")
    shutil.copy(ranks / "rank-0.json.gz", repeated / "b.json.gz")
    return {"ranks": str(ranks), "broken": str(broken), "repeated": str(repeated)}


COMMANDS = [
    ("classify", "{traces}"),
    ("classify", "{traces}/checks", "{ranks}", "{broken}", "{repeated}", "--all"),
    ("report", "{traces}", "{traces}/checks", "{ranks}", "{broken}"),
    ("project", "{traces}", "-s", "category:addressable=1.5"),
    ("project", "{ranks}", "{repeated}", "-s", "category:gemm=2"),
    ("targets", "{traces}/resnet-50.train.json.gz"),
    ("targets", "{ranks}"),
]


# make test runs the cheaper commands of each kind; report and project over the traces folder (the same
# guarantee, 9 s more) run in make test-slow.
RAY_SLOW = {("report", "{traces}"), ("project", "{traces}")}


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=[pytest.mark.slow] if c[:2] in RAY_SLOW else []) for c in COMMANDS],
    ids=[" ".join(c[:2]).replace("{", "").replace("}", "") for c in COMMANDS],
)
def test_ray_json_is_the_one_process_json(command, rank_dirs):
    args = [a.format(traces=TRACES, **rank_dirs) for a in command] + ["--json"]
    code, local, local_err = invoke(args + ["--engine", "local"])
    code_ray, on_ray, ray_err = invoke(args + ["--engine", "ray"])
    assert local and on_ray.encode() == local.encode()
    assert (code_ray, ray_err) == (code, local_err)
    broken = "{broken}" in command
    assert code == (2 if broken else 0)
    if broken:
        assert "rank-1.json.gz" in local_err and "analysed one by one" in local_err


def test_classify_of_shipped_traces_counts(rank_dirs):
    code, out, _ = invoke(["classify", str(TRACES), "--json", "--engine", "ray"])
    docs = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(docs) == len(list(TRACES.glob("*.json.gz"))) == 13
    code, out, _ = invoke(["classify", rank_dirs["ranks"], "--json", "--engine", "ray"])
    (doc,) = [json.loads(line) for line in out.splitlines()]
    assert doc["schema"] == "headroom.classify.ranks/1" and doc["ranks"] == [0, 1] and doc["slowest_rank"] == 1


def test_bad_engine_and_address_are_one_line():
    code, _, err = invoke(["classify", str(TRACES / "bert-base.infer.json.gz"), "--engine", "dask"])
    assert code == 2 and err == "headroom: error: --engine dask: expected one of local, ray"
    code, _, err = invoke(["classify", str(TRACES / "bert-base.infer.json.gz"), "--address", "auto"])
    assert code == 2 and err == "headroom: error: --address: only with --engine ray"
    code, _, err = invoke(
        [
            "verify",
            str(CHEATERS / "problems" / "clamp_unit.py"),
            str(CHEATERS / "candidates" / "honest_clamp.py"),
            "--device",
            "cpu",
            "--engine",
            "ray",
        ]
    )
    assert code == 2 and err == (
        "headroom: error: --engine: verify spreads the candidates of a --suite; one candidate runs here"
    )


MEASURED = (
    "elapsed_s",
    "timing",
    "per_call",
    "baseline",
    "memory",
    "memory_ratio",
    "speedup",
    "speedup_fp32",
    "speedup_compile",
    "speedup_ci",
    "launches_per_call",
    "info",
    "build",
    "flags",
    "review",
)


def same_but_measured(doc):
    """A suite document with what is measured (times, memory) left out: what two runs must agree on. A
    correct candidate's pass or inconclusive is a timing's call on a loaded machine, so both read "correct"."""

    def one(r):
        r = {k: (None if k in MEASURED else v) for k, v in r.items()}
        if r["verdict"] in ("pass", "inconclusive"):
            r.update(verdict="correct", reason=None)
        r["checks"] = [(c["name"], c["passed"]) for c in r["checks"]]
        return r

    return {**doc, "results": [one(r) for r in doc["results"]]}


def test_a_lost_worker_has_its_candidate_run_again_streamed_once(tmp_path):
    from headroom.fleet import get_engine
    from headroom.fleet.verify import pool_runner
    from headroom.verify import VerifyOptions, verify_suite

    cands = tmp_path / "candidates"
    (cands / "gelu_linear").mkdir(parents=True)
    shutil.copy(CHEATERS / "candidates" / "honest_reimplementation.py", cands / "gelu_linear" / "honest.py")
    shutil.copy(CHEATERS / "candidates" / "cheat_zeros.py", cands / "gelu_linear" / "cheat_zeros.py")
    shutil.copy(CHEATERS / "candidates" / "honest_clamp.py", cands / "clamp_unit.py")
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("gelu_linear", "clamp_unit", "large_mean"):
        shutil.copy(CHEATERS / "problems" / f"{name}.py", suite / f"{name}.py")
    dispatched: list[int] = []
    killed = []
    lines_seen = []
    out = tmp_path / "results.json"
    stream = tmp_path / "results.jsonl"

    def kill_first(actor, index):
        dispatched.append(index)
        lines_seen.append(len(stream.read_bytes().splitlines()))
        if not killed:  # the first candidate's worker dies while it works
            killed.append(index)
            ray.kill(actor, no_restart=True)

    engine = get_engine("ray")
    assert engine.workers() == (2, {"num_cpus": 1})  # no GPU here: one actor per CPU
    opts = VerifyOptions.quick(seed=1)  # short rounds: what is under test is the pool, not the timing
    doc = verify_suite(
        suite, cands, opts, out=out, run_pairs=pool_runner(engine, stream_to=out, on_dispatch=kill_first)
    )
    names = [(r["problem"], Path(r["candidate"]).name) for r in doc["results"]]
    # The suite's order, each candidate once; the killed one dispatched twice.
    assert names == [("clamp_unit", "clamp_unit.py"), ("gelu_linear", "cheat_zeros.py"), ("gelu_linear", "honest.py")]
    assert sorted(dispatched) == [0, 0, 1, 2] and killed == [0]
    verdicts = dict(zip(names, (r["verdict"] for r in doc["results"])))
    assert verdicts[("gelu_linear", "cheat_zeros.py")] == "fail"
    assert verdicts[("clamp_unit", "clamp_unit.py")] in ("pass", "inconclusive")
    assert json.loads(out.read_text()) == json.loads(json.dumps(doc))
    assert doc["missing_candidates"] == ["large_mean"] and doc["device"] == "cpu"
    # The stream: one line per candidate (the retried one too), each the document's result as it finished;
    # the first two dispatches found it empty (two workers), the retry no line of the lost candidate.
    lines = [json.loads(line) for line in stream.read_text().splitlines()]
    assert len(lines) == 3 and lines_seen[:2] == [0, 0]
    assert sorted((d["problem"], Path(d["candidate"]).name) for d in lines) == sorted(names)
    by_key = {(d["problem"], d["candidate"]): d for d in lines}
    assert [by_key[(r["problem"], r["candidate"])] for r in doc["results"]] == doc["results"]
    # The sequential path on the same suite: the same document but for what is measured.
    local = tmp_path / "local.json"
    verify_suite(suite, cands, opts, out=local)
    a, b = same_but_measured(json.loads(local.read_text())), same_but_measured(json.loads(out.read_text()))
    assert [{k for k in x if x[k] != y[k]} for x, y in zip(a["results"], b["results"])] == [set()] * 3
    assert a == b
    assert not (tmp_path / "local.jsonl").exists()


def test_resume_takes_the_streamed_candidates_and_runs_the_rest(tmp_path, monkeypatch):
    import headroom.fleet.verify as fv
    from headroom.fleet import LocalEngine
    from headroom.verify import VerifyOptions, verify_suite

    suite, cands = tmp_path / "suite", tmp_path / "candidates"
    suite.mkdir()
    cands.mkdir()
    for name in ("clamp_unit", "gelu_linear"):
        shutil.copy(CHEATERS / "problems" / f"{name}.py", suite / f"{name}.py")
    shutil.copy(CHEATERS / "candidates" / "honest_clamp.py", cands / "clamp_unit.py")
    shutil.copy(CHEATERS / "candidates" / "cheat_zeros.py", cands / "gelu_linear.py")
    out = tmp_path / "r.json"
    opts = VerifyOptions.quick()
    first = verify_suite(suite, cands, opts, out=out, run_pairs=fv.pool_runner(LocalEngine(), stream_to=out))
    stream = fv.stream_path(out)
    assert stream == tmp_path / "r.jsonl" and fv.stream_path(tmp_path / "r.out") == tmp_path / "r.out.jsonl"
    one, two = stream.read_bytes().splitlines()
    # A driver killed while writing its second line: the first line and half of the second are left.
    stream.write_bytes(one + b"\n" + two[: len(two) // 2])
    ran = []
    real = fv.verify_one
    monkeypatch.setattr(fv, "verify_one", lambda unit: ran.append(Path(unit[1]).name) or real(unit))
    out.unlink()
    again = verify_suite(
        suite, cands, opts, out=out, run_pairs=fv.pool_runner(LocalEngine(), stream_to=out, resume=True)
    )
    assert ran == ["gelu_linear.py"]
    assert again["results"][0] == first["results"][0]  # read back, not run
    assert [r["verdict"] for r in again["results"]] == [r["verdict"] for r in first["results"]]
    assert [json.loads(x)["candidate"] for x in stream.read_bytes().splitlines()] == [
        str(cands / "clamp_unit.py"),
        str(cands / "gelu_linear.py"),
    ]
    stream.write_bytes(b"{}\n" + one + b"\n")  # a line that is no result, not the last: exit 2
    code, _, err = invoke(
        [
            "verify",
            "--suite",
            str(suite),
            "--candidates",
            str(cands),
            "--device",
            "cpu",
            "--engine",
            "ray",
            "--out",
            str(out),
            "--resume",
        ]
    )
    assert code == 2 and err.startswith(f"headroom: error: {stream}:1: not a streamed verify result")
    code, _, err = invoke(
        ["verify", "--suite", str(suite), "--candidates", str(cands), "--device", "cpu", "--resume", "--out", str(out)]
    )
    assert code == 2 and err == (
        "headroom: error: --resume: only with --engine ray and --out (it reads the stream OUT.jsonl)"
    )


def test_import_headroom_and_the_local_engine_do_not_import_ray():
    code = (
        "import sys, headroom\n"
        "from headroom.fleet import get_engine\n"
        "from headroom.cli import trace, project, verify\n"
        "e = get_engine('local')\n"
        "assert list(e.map(abs, [-1, 2])) == [1, 2]\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_without_ray_the_engine_says_which_extra():
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from headroom.errors import UserError\n"
        "from headroom.fleet import get_engine\n"
        "try:\n    get_engine('ray')\nexcept UserError as e:\n    print(e)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.stdout.strip() == "--engine ray needs ray, which is not installed: pip install 'kernel-headroom[fleet]'"
