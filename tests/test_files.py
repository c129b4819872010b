"""headroom/files.py: an output never resolves to an input, and a place that cannot be written is
refused before the work; every command that writes uses the one check."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from headroom.errors import UserError
from headroom.files import check_output_dir, check_output_not_input
from tests.conftest import SHIPPED_TRACES

VIT = SHIPPED_TRACES / "vit-b-16.infer.json.gz"


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_the_same_file_by_any_name_is_refused(tmp_path):
    a = tmp_path / "a.json"
    a.write_text("{}")
    os.link(a, tmp_path / "hard.json")
    (tmp_path / "soft.json").symlink_to(a)
    for out in (a, tmp_path / "hard.json", tmp_path / "soft.json", tmp_path / "." / "a.json"):
        with pytest.raises(UserError, match="is also an input of this command"):
            check_output_not_input(out, [a])
    assert check_output_not_input(tmp_path / "b.json", [a, None]) == tmp_path / "b.json"


def test_a_file_written_into_an_input_directory_is_refused_only_when_it_would_be_read(tmp_path):
    reads_json = lambda p: p.suffix == ".json"  # noqa: E731
    with pytest.raises(UserError, match="would be written into the input directory"):
        check_output_not_input(tmp_path / "fig.json", [tmp_path], reads=reads_json)
    check_output_not_input(tmp_path / "fig.png", [tmp_path], reads=reads_json)
    check_output_not_input(tmp_path / "sub" / "fig.json", [tmp_path], reads=reads_json)


def test_check_output_dir_without_create_leaves_the_disk_alone(tmp_path):
    d = tmp_path / "x" / "y"
    assert check_output_dir(d, create=False) == d and not (tmp_path / "x").exists()
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(UserError, match="exists and is not a directory"):
        check_output_dir(f / "sub", create=False)


def test_check_output_dir_without_create_refuses_a_read_only_place(tmp_path, monkeypatch):
    # os.access answers for the real user (root passes every mode check): simulate a read-only folder
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != tmp_path)
    with pytest.raises(UserError, match=rf"cannot create the directory \({tmp_path} is not writable\)"):
        check_output_dir(tmp_path / "out", create=False)


def test_annotate_refuses_to_write_over_its_input(headroom, tmp_path):
    t = tmp_path / "t.json.gz"
    shutil.copy(VIT, t)
    before = _digest(t)
    os.link(t, tmp_path / "hard.json.gz")
    for out in (t, tmp_path / "hard.json.gz"):
        p = headroom("annotate", t, "--out", out)
        assert p.returncode == 2 and p.stdout == ""
        assert p.stderr.splitlines() == [
            f"headroom: error: --out {out}: is also an input of this command; "
            f"writing it would destroy it (choose another --out)"
        ]
    assert _digest(t) == before


def test_annotate_refuses_to_write_over_its_rules(headroom, tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text("")
    p = headroom("annotate", VIT, "--rules", rules, "--out", rules)
    assert p.returncode == 2 and "is also an input" in p.stderr and rules.read_text() == ""


@pytest.mark.parametrize("which", ["problem", "candidate"])
def test_verify_refuses_an_out_that_is_its_problem_or_candidate(headroom, tmp_path, which):
    problem, candidate = tmp_path / "P.py", tmp_path / "C.py"
    problem.write_text("# the problem\n")
    candidate.write_text("# the candidate\n")
    out = problem if which == "problem" else candidate
    p = headroom("verify", problem, candidate, "--out", out)
    assert p.returncode == 2 and "is also an input of this command" in p.stderr and "Traceback" not in p.stderr
    assert problem.read_text() == "# the problem\n" and candidate.read_text() == "# the candidate\n"


def test_bench_run_refuses_an_out_among_the_candidates(headroom, tmp_path):
    (tmp_path / "c.py").write_text("# candidate\n")
    p = headroom("bench", "run", "--candidates", tmp_path, "--out", tmp_path / "c.py")
    assert p.returncode == 2 and "would be written into the input directory" in p.stderr
    assert (tmp_path / "c.py").read_text() == "# candidate\n"


def test_plot_numbers_into_the_trace_directory_is_refused_before_anything_is_written(headroom, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(VIT, d / VIT.name)
    p = headroom("plot", d, "-o", d, "--numbers", "--figure", "addressable", "--format", "png")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [
        f"headroom: error: --out {d}/addressable.json: would be written into "
        f"the input directory {d}, where it would be read as input "
        f"(choose another --out)"
    ]
    assert sorted(x.name for x in d.iterdir()) == [VIT.name]  # and `report d` still reads one trace
    # figures alone (no FIGURE.json) are not read as traces: allowed there
    p = headroom("plot", d, "-o", d, "--figure", "addressable", "--format", "png")
    assert p.returncode == 0 and sorted(x.name for x in d.iterdir()) == ["addressable.png", VIT.name]


def test_validate_never_replaces_a_folder_holding_its_candidate_or_someone_elses(headroom, tmp_path, monkeypatch):
    """`validate --replace X=work/cand.py --out work` replaced the folder `work` whole, the candidate with it."""
    from headroom.files import check_replaceable_dir

    work = tmp_path / "work"
    work.mkdir()
    cand = work / "llama_rmsnorm.py"
    cand.write_bytes((SHIPPED_TRACES.parent / "examples/substitutions/llama_rmsnorm.py").read_bytes())
    p = headroom(
        "validate",
        "llama-7b",
        "--flavour",
        "tiny",
        "--device",
        "cpu",
        "--replace",
        f"LlamaRMSNorm={cand}",
        "--out",
        work,
    )
    assert p.returncode == 2 and cand.is_file()
    assert f"--out {work}: holds an input of this command ({cand})" in p.stderr
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    with pytest.raises(UserError, match="a folder that is not an earlier run"):
        check_replaceable_dir(notes, [cand], own=("result.json", "run.json"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="is replaced whole; name a new one"):
        check_replaceable_dir(".", [cand], own=("result.json",))
    (notes / "run.json").write_text("{}")  # an earlier run: replaced, as before
    assert check_replaceable_dir(notes, [cand], own=("result.json", "run.json")) == notes
