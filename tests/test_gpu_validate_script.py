"""scripts/gpu_validate.py's own pieces (the whole loop runs on a CPU with `--device cpu`; on the H200
in one command): the training form of a candidate, the GPU-kernel names, the archives, --json parsing."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import torch

from headroom.pyfile import import_file

REPO = Path(__file__).resolve().parents[1]
script = import_file(REPO / "scripts" / "gpu_validate.py", "gpu_validate")


def test_the_substitution_set_covers_what_issue_11_asks():
    subs = script.SUBSTITUTIONS
    assert len(subs) >= 5 and len({s[1] for s in subs}) >= 3
    assert any("decode" in s[2] and "1" in s[2] for s in subs)                 # launch-bound: decode, batch 1
    assert any(s[1] in script.TRAINING for s in subs)                         # a training case
    for _name, _, _, _, cand, est in subs:
        assert (script.CAND / cand).is_file() and est > 0
    assert sum(s[5] for s in subs[:5]) <= 510                                 # five fit the default budget


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
    script.archive(work2, out, slot=1)        # the slot's archive is rewritten with both
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
