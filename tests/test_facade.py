"""`import headroom` gives the nine tasks, each its command's code path with its defaults: real runs on the CPU
(a tiny workload profiled, a problem extracted, a candidate verified, a saved validation recomputed, the
shipped traces analysed, ranked, projected, compared and plotted), each checked against the command."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import headroom
from headroom.jsonio import dumps, plain
from tests.conftest import REPO, SHIPPED_TRACES

DLRM = SHIPPED_TRACES / "dlrm.train.json.gz"
PREFILL = SHIPPED_TRACES / "llama-7b.infer.prefill.json.gz"
CHEATERS = REPO / "tests" / "cheaters"
SAVED_VALIDATION = REPO / "docs" / "gpu" / "validation" / "llama7b-prefill-rmsnorm"
TINY_DLRM = dict(flavour="tiny", batch=64)
ONE_STEP = dict(device="cpu", steps=1, warmup=1, timed_steps=1)
RESULT_TYPES = {
    "profile": "ProfileResult",
    "analyze": "Analysis",
    "targets": "Targets",
    "project": "ProjectResult",
    "diff": "Diff",
    "extract": "ExtractResult",
    "verify": "VerifyResult",
    "validate": "ValidateResult",
    "plot": "Plots",
}


@pytest.fixture
def cli(headroom):  # conftest's `headroom` fixture (the command line) under a name that leaves the package be
    return headroom


def _document(p: subprocess.CompletedProcess) -> dict:
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    doc.pop("schema")
    return doc


# --- the facade itself ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", headroom.api.TASKS)
def test_each_task_is_documented_and_typed(task):
    """Each of the nine: callable from `headroom`, a docstring naming its command, every parameter and the
    result annotated, the result one of the package's own result types."""
    fn = inspect.unwrap(getattr(headroom, task))
    assert fn is getattr(headroom.api, task)
    doc = " ".join((inspect.getdoc(fn) or "").split())
    command = "headroom classify" if task == "analyze" else f"headroom {task}"
    assert f"`{command}" in doc and ("Returns" in doc or "returns" in doc), task
    sig = inspect.signature(fn)
    assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values()), task
    hints = typing.get_type_hints(fn, vars(headroom.api) | vars(sys.modules[fn.__module__]))
    assert RESULT_TYPES[task] in str(hints["return"]), (task, hints["return"])
    assert inspect.signature(getattr(headroom, task)) == sig


def test_task_packages_are_packages_and_tasks():
    """headroom.profile/extract/verify/validate are the subpackages (their modules import as before) and,
    called, the tasks."""
    import headroom.profile.run as run
    import headroom.verify.options

    assert headroom.profile.run is run and headroom.verify.options.VerifyOptions is headroom.VerifyOptions
    assert headroom.profile.__name__ == "headroom.profile" and callable(headroom.profile)
    assert inspect.signature(headroom.validate).parameters["tolerance"].default is None


def test_reading_functions_take_one_read_options():
    """No function repeats the six reading options: each that reads a path takes `read`, a ReadOptions
    defaulting to the commands' flags unset."""
    six = {"rules", "policy", "whole_trace", "window", "lenient", "use_cache"}
    readers = [
        "analyze",
        "analyze_all",
        "read_inputs",
        "analyze_ranks",
        "coverage",
        "diff",
        "diff_html",
        "project",
        "predict",
        "targets",
        "project_ranks",
        "report_html",
        "plot",
    ]
    for name in readers:
        params = inspect.signature(getattr(headroom.api, name)).parameters
        assert not six & set(params), name
        assert params["read"].default == headroom.ReadOptions(), name
    with pytest.raises(Exception, match="cannot assign"):
        headroom.ReadOptions().lenient = True  # frozen


def test_import_headroom_loads_neither_torch_nor_matplotlib():
    code = (
        "import headroom, sys; headroom.analyze; print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.stdout.strip() == "[]", p.stderr


# --- the shipped traces: analyze, targets, project, diff, plot ---------------------------------------------


def test_analyze_is_classify(cli):
    a = headroom.analyze(DLRM)
    assert json.loads(dumps(a.to_dict())) == {k: v for k, v in _document(cli("classify", DLRM, "--json")).items()}


def test_read_options_read_as_the_flags_do(cli):
    """`read=ReadOptions(whole_trace=True)` is --whole-trace: another basis, and the command's numbers."""
    whole = headroom.analyze(DLRM, read=headroom.ReadOptions(whole_trace=True, use_cache=False))
    doc = _document(cli("classify", DLRM, "--whole-trace", "--no-cache", "--json"))
    assert whole.to_dict()["basis"] == doc["basis"] != headroom.analyze(DLRM).to_dict()["basis"]
    assert json.loads(dumps(whole.to_dict())) == doc


def test_targets_is_the_command(cli):
    t = headroom.targets(DLRM, top=3)
    doc = _document(cli("targets", DLRM, "--top", "3", "--json"))
    assert json.loads(dumps(t))["targets"] == doc["targets"] and doc["targets"][0]["name"] == "aten::_index_put_impl_"


def test_project_is_the_command(cli):
    r = headroom.project(PREFILL, speedup=["category:normalization=2"])
    doc = _document(cli("project", PREFILL, "-s", "category:normalization=2", "--json"))
    assert json.loads(dumps(r)) == doc and r.get("amdahl").per_step_us < r.per_step_us


def test_diff_is_the_command(cli):
    before, after = SAVED_VALIDATION / "base.json.gz", SAVED_VALIDATION / "variant.json.gz"
    d = headroom.diff(before, after, by="module")
    doc = _document(cli("diff", before, after, "--by", "module", "--json"))
    assert json.loads(dumps(d)) == {k: v for k, v in doc.items() if k != "gate"}
    assert d.step.speedup > 1


def test_plot_writes_the_commands_files(cli, tmp_path):
    """The same figures, byte for byte, and the same numbers as `headroom plot`; out=None draws only."""
    args = ["--format", "png", "--numbers"]  # (an SVG's element ids differ from run to run)
    p = cli("plot", SHIPPED_TRACES / "scaling", "--out", tmp_path / "cli", *args)
    assert p.returncode == 0, p.stderr
    plots = headroom.plot([SHIPPED_TRACES / "scaling"], out=tmp_path / "api", formats=["png"], numbers=True)
    assert [f.name for f in plots.files] == [Path(line).name for line in p.stdout.split()]
    assert [f.name for f in plots.files] == [
        "addressable.png",
        "addressable.json",
        "projection.png",
        "projection.json",
        "scaling.png",
        "scaling.json",
    ]
    for f in plots.files:
        assert f.read_bytes() == (tmp_path / "cli" / f.name).read_bytes(), f.name
    drawn = headroom.plot([headroom.analyze(DLRM)], out=None, figures=["addressable"])
    assert list(drawn.figures) == ["addressable"] and drawn.files == [] and drawn.numbers == {}
    with pytest.raises(headroom.UserError, match="scaling chart needs traces of one family"):
        headroom.plot([DLRM], out=None, figures=["scaling"])


# --- running things: profile, extract, verify, validate -----------------------------------------------------


def test_profile_a_tiny_workload_as_the_command_does(cli, tmp_path):
    r = headroom.profile("dlrm", headroom.WorkloadOptions(**TINY_DLRM), out=tmp_path / "api", **ONE_STEP)
    assert isinstance(r, headroom.ProfileResult) and r.trace_path.name == "dlrm.tiny.train.json.gz"
    assert {"embedding", "gemm"} <= set(r.analysis.events["category"])
    doc = _document(
        cli(
            "profile",
            "dlrm",
            "--flavour",
            "tiny",
            "--batch",
            "64",
            "--device",
            "cpu",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--timed-steps",
            "1",
            "--out",
            tmp_path / "cli",
            "--json",
        )
    )
    mine = plain(r)
    same = ("workload", "flavour", "variant", "mode", "batch", "dtype", "device", "extra", "params", "info")
    assert {k: mine["manifest"][k] for k in same} == {k: doc["manifest"][k] for k in same}
    assert Path(mine["trace"]).name == Path(doc["trace"]).name and mine["manifest"]["batch"] == 64
    # what was profiled reads back as the same analysis
    assert headroom.analyze(r.trace_path).categories.equals(r.analysis.categories)


def test_extract_writes_the_commands_problem(cli, tmp_path):
    e = headroom.extract(
        "dlrm",
        "InteractionArch",
        headroom.WorkloadOptions(flavour="tiny"),
        device="cpu",
        out=tmp_path / "api",
        profile=False,
    )
    assert isinstance(e, headroom.ExtractResult) and e.calls_per_step == 1 and e.share is None
    doc = _document(
        cli(
            "extract",
            "dlrm",
            "--module",
            "InteractionArch",
            "--flavour",
            "tiny",
            "--device",
            "cpu",
            "--no-profile",
            "--out",
            tmp_path / "cli",
            "--json",
        )
    )
    assert Path(doc["problem"]).name == Path(e.problem).name and doc["selectors"] == e.selectors

    def body(path) -> list[str]:  # all but the line naming the command that wrote it
        return [line for line in Path(path).read_text().splitlines() if not line.startswith("# Written by")]

    assert body(e.problem) == body(doc["problem"]) and "class Model(" in Path(e.problem).read_text()
    assert Path(e.entry).read_text() == Path(doc["entry"]).read_text()


def test_verify_fails_a_cheat_and_refuses_bad_options():
    options = headroom.VerifyOptions(device="cpu", threads=1, rounds=6)
    r = headroom.verify(CHEATERS / "problems" / "gelu_linear.py", CHEATERS / "candidates" / "cheat_zeros.py", options)
    assert isinstance(r, headroom.VerifyResult) and r.verdict == "fail" and r.speedup is None
    assert "rel_l2" in [c.name for c in r.checks if not c.passed]
    with pytest.raises(headroom.UserError, match="--device tpu"):
        headroom.verify(
            CHEATERS / "problems" / "gelu_linear.py",
            CHEATERS / "candidates" / "cheat_zeros.py",
            headroom.VerifyOptions(device="tpu"),
        )


def test_validate_runs_a_tiny_swap_and_reads_it_back(tmp_path):
    """A real run: llama-7b tiny with every LlamaRMSNorm replaced by an identical subclass; what it wrote
    recomputes to the same result."""
    identity = REPO / "tests" / "substitutions" / "identity_rmsnorm.py"
    r = headroom.validate(
        "llama-7b",
        [f"LlamaRMSNorm={identity}"],
        headroom.WorkloadOptions(flavour="tiny"),
        device="cpu",
        threads=1,
        out=tmp_path / "run",
        max_rounds=8,
    )
    assert isinstance(r, headroom.ValidateResult) and r.check["passed"] and r.check["worst"]["rel_l2"] == 0.0
    assert [(x.module, x.instances) for x in r.replacements] == [("LlamaRMSNorm", 5)]
    assert 6 <= r.measured.rounds <= 8 and r.measured.stop in ("tight", "max_rounds", "budget")
    assert plain(headroom.validate(from_dir=tmp_path / "run")) == plain(r)


def test_validate_recomputes_a_saved_run_as_the_command_does(cli):
    r = headroom.validate(from_dir=SAVED_VALIDATION)
    assert isinstance(r, headroom.ValidateResult) and r.workload == "llama-7b"
    assert json.loads(dumps(r)) == _document(cli("validate", "--from", SAVED_VALIDATION, "--json"))
    with pytest.raises(headroom.UserError, match="give no WORKLOAD or --replace"):
        headroom.validate("llama-7b", from_dir=SAVED_VALIDATION)
    with pytest.raises(headroom.UserError, match="at least one --replace"):
        headroom.validate("llama-7b")


def test_the_notebook_uses_only_import_headroom():
    """notebooks/*.ipynb import headroom's API as `import headroom` only: no sys.path edits, no module of it."""
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        assert "sys.path" not in code, path.name
        imports = [line.strip() for line in code.splitlines() if line.strip().startswith(("import ", "from "))]
        assert [i.split("#")[0].strip() for i in imports if "headroom" in i] == ["import headroom"], path.name


def test_the_api_reference_has_a_section_per_task_naming_its_parameters():
    """docs/api.md: a `## headroom.TASK` section for each of the nine, and the table row of each names every
    parameter the function takes (a parameter added or renamed fails here until the reference says so)."""
    text = (REPO / "docs" / "api.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    for task in headroom.api.TASKS:
        assert f"\n## headroom.{task}\n" in text, task
        row = rows[task]
        for name in inspect.signature(getattr(headroom.api, task)).parameters:
            assert re.search(rf"[(, ]{name}\b", row.split("|")[2]), (task, name)


def test_profile_of_ranks_needs_two_or_more(tmp_path):
    """options.parallel with one process: refused before anything runs, as `profile --parallel ddp` is."""
    with pytest.raises(headroom.UserError, match="--nproc must be at least 2"):
        headroom.profile(
            "bert-base", headroom.WorkloadOptions(flavour="tiny", parallel="ddp"), device="cpu", out=tmp_path
        )
    assert not any(tmp_path.iterdir())
