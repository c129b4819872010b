"""lab/gpu/gpu_validate.py's own pieces (the whole loop runs on a CPU with `--device cpu`; on the H200
in one command): the training form of a candidate, the GPU-kernel names, the archives, --json parsing."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import torch

from headroom.pyfile import import_file

REPO = Path(__file__).resolve().parents[1]
script = import_file(REPO / "lab" / "gpu" / "gpu_validate.py", "gpu_validate")


def test_the_substitution_set_covers_what_issue_11_asks():
    subs = script.SUBSTITUTIONS
    assert len(subs) >= 5 and len({s[1] for s in subs}) >= 3
    assert any("decode" in s[2] and "1" in s[2] for s in subs)  # launch-bound: decode, batch 1
    assert any(s[1] in script.TRAINING for s in subs)  # a training case
    for _name, _, _, _, cand, est in subs:
        assert (script.CAND / cand).is_file() and est > 0
    assert sum(s[5] for s in subs[:5]) <= 510  # five fit the default budget


def test_gpu_kernel_names_are_read_from_the_candidates():
    assert script.gpu_kernels(script.CAND / "llama_rmsnorm.py") == ("_rms_norm_fwd",)
    assert script.gpu_kernels(script.CAND / "dlrm_interaction.py") == ()


def test_the_training_form_of_a_candidate_runs_forward_and_backward(tmp_path):
    path = script.training_candidate(Path("examples/substitutions/dlrm_interaction.py"), tmp_path / "c.py")
    mod = import_file(path, "train_cand")
    dense = torch.randn(4, 8)
    sparse = torch.randn(4, 3, 8)
    grad = torch.randn(4, 8 + 6)
    out, d_dense, d_sparse = mod.ModelNew(3)(dense, sparse, grad)
    assert out.shape == grad.shape and d_dense.shape == dense.shape and d_sparse.shape == sparse.shape


def test_archives_hold_the_run_at_the_top_and_the_loop_files_below(tmp_path):
    work = tmp_path / "work" / "sub-a"
    (work / "run").mkdir(parents=True)
    (work / "run" / "run.json").write_text("{}")
    (work / "run" / "base.json.gz").write_bytes(b"x")
    (work / "verify.json").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    assert script.archive(work, out, slot=1) == "runs-1.tar.gz"
    work2 = tmp_path / "work" / "sub-b"
    (work2 / "run").mkdir(parents=True)
    (work2 / "run" / "run.json").write_text("{}")
    script.archive(work2, out, slot=1)  # the slot's archive is rewritten with both
    with tarfile.open(out / "runs-1.tar.gz") as tar:
        names = sorted(tar.getnames())
    assert "sub-a/run.json" in names and "sub-a/base.json.gz" in names and "sub-a/loop/verify.json" in names
    assert "sub-b/run.json" in names


def test_json_output_is_parsed_whole_or_from_its_last_line():
    assert script.parse_json('{"a": 1}') == {"a": 1}
    assert script.parse_json('{\n "a": 1\n}') == {"a": 1}
    assert script.parse_json('chatter\n{"b": 2}\n') == {"b": 2}
    assert script.parse_json("") == {} and script.parse_json("not json") == {}
    assert json.loads(json.dumps(script.parse_json('{"c": [1, 2]}'))) == {"c": [1, 2]}


def test_the_new_rows_of_issue_48_are_eight_and_each_runs_a_known_candidate_on_a_known_class():
    committed = {p.name for p in (REPO / "docs" / "gpu" / "apriori").iterdir() if (p / "verify.json").is_file()}
    names = [s[0] for s in script.SUBSTITUTIONS]
    assert len(names) == len(set(names))
    new = [n for n in names if n not in committed]
    assert len(new) >= 8 and len(committed) == 8
    # a synchronising and a slower candidate where the launches bound the step, and a second model's LayerNorm
    assert {
        "llama7b-decode-bs1-rmsnorm-checked",
        "llama7b-decode-bs1-rmsnorm-fp64",
        "llama7b-decode-bs1-swiglu",
        "llama7b-prefill-swiglu",
        "gpt2xl-decode-bs1-layernorm",
    } <= set(new)
    for _name, _, _opts, module, cand, est in script.NEW_ROWS:
        assert (script.CAND / cand).is_file() and est > 0
        assert module in (script.CAND / cand).read_text()  # the candidate names the class it replaces


def test_a_whole_loop_run_becomes_an_apriori_row_and_a_failed_verify_does_not(tmp_path):
    imp = import_file(REPO / "lab" / "gpu" / "apriori_import.py", "apriori_import")
    src = REPO / "docs" / "gpu" / "apriori" / "bert-layernorm"
    run = tmp_path / "runs" / "bert-new"
    (run / "loop" / "problem").mkdir(parents=True)
    for name in ("base.json.gz", "run.json", "result.json"):
        (run / name).write_bytes((src / name).read_bytes())
    (run / "loop" / "verify.json").write_bytes((src / "verify.json").read_bytes())
    entry = "bert-base__LayerNorm.toml"
    (run / "loop" / "problem" / entry).write_bytes((src / entry).read_bytes())
    root = tmp_path / "apriori"
    assert imp.import_run(run, root) == f"{root / 'bert-new'}: added"
    assert sorted(p.name for p in (root / "bert-new").iterdir()) == sorted(
        ["base.json.gz", "run.json", "result.json", "verify.json", "bert-base__LayerNorm.toml"]
    )
    assert imp.import_run(run, root).endswith(": exists")
    from headroom.report.apriori import apriori_rows

    (row,) = apriori_rows(root)
    assert row.name == "bert-new" and row.estimate > 1
    bad = json.loads((src / "verify.json").read_text())
    bad["verdict"] = "inconclusive"
    (run / "loop" / "verify.json").write_text(json.dumps(bad))
    assert imp.import_run(run, tmp_path / "other").endswith("verify did not pass: no a-priori estimate")
