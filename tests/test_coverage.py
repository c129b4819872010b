"""`headroom coverage`: which suite problems the shipped traces exercise, and only the kernels each replaces."""

from __future__ import annotations

import json

import pytest
from conftest import SHIPPED_TRACES

import headroom
from headroom.errors import UserError
from headroom.projection.coverage import coverage, suite_problems
from headroom.trace.analysis import analyze

DLRM = SHIPPED_TRACES / "dlrm.train.json.gz"
DCN = SHIPPED_TRACES / "dlrm-dcn.train.json.gz"
TRANSFORMERS = sorted(
    p
    for p in SHIPPED_TRACES.glob("*.json.gz")
    if p.name.split(".")[0] in ("llama-7b", "gpt2-xl", "bert-base", "vit-b-16", "resnet-50")
)


def test_the_shipped_dlrm_traces_match_their_problems_with_shares_of_gpu_time():
    c = coverage([analyze(DLRM), analyze(DCN)], suite="dlrm")
    by = {p.name: p for p in c.problems}
    assert len(c.problems) == 12
    assert set(c.matched) == {
        "01_EmbeddingBagSum",
        "04_DotInteraction",
        "05_DotInteractionBackward",
        "06_DCNv2LowRankCross",
    }
    assert [m.trace.split("/")[-1] for m in by["06_DCNv2LowRankCross"].matches] == [DCN.name]
    back = by["05_DotInteractionBackward"].matches[0]
    # the interaction's whole backward: the gather's index_put_ (~29%), the bmm backwards, the dZ sum
    assert back.mode == "gpu" and 0.40 < back.share < 0.50
    assert set(back.ops) == {"aten::_index_put_impl_", "aten::bmm", "aten::add_"}
    inter = by["04_DotInteraction"].matches[0]
    assert inter.trace.endswith(DLRM.name) and set(inter.ops) == {"aten::bmm", "aten::cat", "aten::index"}
    assert "02_WeightedMeanEmbeddingBag" in c.unmatched
    frame = c.to_frame()
    assert len(frame) == sum(max(1, len(p.matches)) for p in c.problems)


@pytest.mark.parametrize("trace", TRANSFORMERS, ids=lambda p: p.name)
def test_no_dlrm_problem_matches_a_transformer_trace(trace):
    """A bare aten::bmm (Llama's rotary embedding, attention) is no DLRM dot interaction (nor a vision model's ops)."""
    assert coverage([analyze(trace)], suite="dlrm").matched == []


def test_every_problem_matches_the_shipped_recommender_traces_and_no_two_share_an_event():
    import numpy as np

    from headroom.projection.matching import _Matcher
    from headroom.projection.problems import load_problems

    c = headroom.coverage([SHIPPED_TRACES], suite="dlrm")
    assert c.matched_count == 12 and c.unmatched == []
    assert all(m.share > 0 for p in c.problems for m in p.matches)
    probs = load_problems()
    for name in ("dlrm.train", "dlrm-dcn.train", "deepfm.train", "din.train", "dlrm-int8.infer"):
        a = analyze(SHIPPED_TRACES / f"{name}.json.gz")
        matcher = _Matcher(a.events, probs)
        seen = np.zeros(matcher.n, dtype=int)
        for p in suite_problems("dlrm", probs):
            mask = np.zeros(matcher.n, dtype=bool)
            for sel in p.selectors:
                mask |= matcher.selector(sel)
            seen += mask
        assert seen.max() == 1, name
    int8 = {p.name: p for p in c.problems}
    assert [m.trace.split("/")[-1] for m in int8["01_EmbeddingBagSum"].matches] == [DCN.name, DLRM.name]


def test_the_api_reads_a_directory_and_suites_are_named():
    c = headroom.coverage([SHIPPED_TRACES], suite="dlrm")
    assert len(c.traces) >= 13 and len(c.matched) == 12
    assert len(suite_problems("kernelbench")) >= 30
    with pytest.raises(UserError, match="unknown suite"):
        suite_problems("mlperf")


def test_cli_table_json_strict_and_bad_input(headroom, tmp_path):
    p = headroom("coverage", "--suite", "dlrm", DLRM)
    assert p.returncode == 0 and "05_DotInteractionBackward" in p.stdout and "3 of 12 problems matched" in p.stdout
    assert "no trace exercises it" in p.stdout
    p = headroom("coverage", "--json", DLRM)
    doc = json.loads(p.stdout)
    assert doc["schema"] == "headroom.coverage/1" and doc["suite"] == "DLRM-Bench" and doc["matched"] == 3
    assert len(doc["unmatched"]) == 9 and doc["problems"][4]["matches"][0]["share"] > 0.25
    p = headroom("coverage", "--strict", DLRM)
    assert p.returncode == 1 and "9 of 12 DLRM-Bench problems match no trace" in p.stderr
    for args, needle in (
        (("--suite", "mlperf", DLRM), "unknown suite"),
        ((tmp_path / "none.json.gz",), "none.json.gz"),
    ):
        p = headroom("coverage", *args)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and p.stdout == "" and len(lines) == 1 and needle in lines[0], p.stderr
