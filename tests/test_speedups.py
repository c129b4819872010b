"""Speedup input: selectors, files (TOML/JSON/CSV/verify), the problem mapping, and resolution warnings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headroom.errors import UserError
from headroom.jsonio import plain
from headroom.projection.distributions import Distribution, load_distribution
from headroom.projection.matching import resolve, select
from headroom.projection.problems import load_problems
from headroom.projection.selectors import parse_selector
from headroom.projection.speedups import collect_entries, load_speedup_file, parse_cli_speedup, parse_factor

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def events() -> pd.DataFrame:
    """Five kernels with known durations; wall_us == dur (one stream, no overlap)."""
    return pd.DataFrame(
        {
            "name": [
                "nvjet_gemm",
                "EmbeddingBag_updateOutputKernel",
                "vectorized_layer_norm_kernel",
                "triton_poi_fused_add_0",
                "Memcpy DtoD",
            ],
            "kind": ["kernel", "kernel", "kernel", "kernel", "memcpy"],
            "op": [
                "aten::mm",
                "aten::_embedding_bag",
                "aten::native_layer_norm",
                "triton_poi_fused_add_0",
                "aten::copy_",
            ],
            "top_op": ["aten::linear", "aten::embedding_bag", "aten::layer_norm", "CompiledFunction", "aten::to"],
            "module": ["Model_0.Linear_0", "Model_0.EmbeddingBag_0", "Model_0.LayerNorm_0", "", ""],
            "annotation": ["", "", "", "", ""],
            "category": ["gemm", "embedding", "normalization", "fused", "memory"],
            "addressable": [False, True, True, True, False],
            "dur": [100.0, 60.0, 40.0, 10.0, 5.0],
            "wall_us": [100.0, 60.0, 40.0, 10.0, 5.0],
        }
    )


# --- selectors ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("category:embedding", [1]),
        ("category:addressable", [1, 2, 3]),
        ("category:*", [0, 1, 2, 3, 4]),
        ("category:norm*", [2]),
        ("op:aten::layer_norm", [2]),  # the top-level op
        ("op:aten::native_layer_norm", [2]),  # the innermost op
        ("op:aten::*norm*", [2]),
        ("op:aten::add", []),  # exact, not a substring
        ("kernel:^triton_", [3]),
        ("kernel:EMBEDDINGBAG", [1]),  # case-insensitive
        ("module:LayerNorm", [2]),
        ("kind:memcpy", [4]),
        ("op:aten::mm & category:gemm", [0]),
        ("category:addressable & !kernel:triton", [1, 2]),
        ("problem:40_LayerNorm", [2]),
        ("problem:01_EmbeddingBagSum", [1]),
    ],
)
def test_selectors_pick_the_expected_kernels(events, text, expected):
    assert np.flatnonzero(select(events, text)).tolist() == expected


@pytest.mark.parametrize(
    "bad", ["", "embedding", "cat:embedding", "kernel:(", "category:", "!category:gemm", "kind:graph"]
)
def test_bad_selectors_are_user_errors(bad):
    with pytest.raises(UserError):
        parse_selector(bad)


def test_category_selectors_read_the_categories_events_have():
    """A category selector matches by text, missing categories match nothing, and a name only declared by a
    category column (no event has it) is a typo, as a name no event has is."""
    categories = pd.Categorical(["gemm", None, "gemm", "mycat"], categories=["gemm", "mycat", "unused"])
    ev = pd.DataFrame({"category": categories, "name": ["a", "b", "c", "d"], "dur": [1.0, 2.0, 3.0, 4.0]})
    assert select(ev, "category:gemm").tolist() == [True, False, True, False]
    assert select(ev, "category:mycat").tolist() == [False, False, False, True]
    with pytest.raises(UserError, match="unknown category 'unused'"):
        select(ev, "category:unused")
    text = ev.assign(category=ev["category"].astype(object))
    assert select(text, "category:mycat").tolist() == [False, False, False, True]


def test_cli_speedup_parsing():
    e = parse_cli_speedup("category:embedding=1.552")
    assert str(e.selector) == "category:embedding" and e.speedup == 1.552 and e.source == "command line"
    # The last '=' separates the factor, so a regex may contain '='.
    e = parse_cli_speedup("kernel:a=b=2")
    assert e.selector.atoms[0].pattern == "a=b" and e.speedup == 2.0
    e = parse_cli_speedup("op:aten::mm & category:gemm=1.3")
    assert len(e.selector.atoms) == 2


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "", "abc"])
def test_invalid_cli_factors_are_errors(value):
    with pytest.raises(UserError):
        parse_cli_speedup(f"category:embedding={value}")


@pytest.mark.parametrize("value", [0, -2.0, math.nan, math.inf, None, True, "x"])
def test_parse_factor_rejects(value):
    with pytest.raises(UserError):
        parse_factor(value, "here")


def test_missing_factor_in_cli():
    with pytest.raises(UserError, match="SELECTOR=FACTOR"):
        parse_cli_speedup("category:embedding")


# --- files ---------------------------------------------------------------------------


def test_toml_file(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(
        'source = "bench run 7"\n'
        '[[speedup]]\nselect = "category:embedding"\nspeedup = 1.552\nverified = true\n'
        '[[speedup]]\nop = "aten::mm"\nkernel = "gemv"\nspeedup = 2\n'
    )
    sf = load_speedup_file(p)
    assert [str(e.selector) for e in sf.entries] == ["category:embedding", "op:aten::mm & kernel:gemv"]
    assert sf.entries[0].verified is True and sf.entries[1].verified is None
    assert sf.entries[0].source == "bench run 7"


@pytest.mark.parametrize(
    "body,match",
    [
        ('[[speedup]]\nselect = "category:embedding"\n', "missing speedup"),
        ('[[speedup]]\nselect = "category:embedding"\nspeedup = 0\n', "> 0"),
        ('[[speedup]]\nselect = "category:embedding"\nspeedup = -1.5\n', "> 0"),
        ('[[speedup]]\nselect = "category:embedding"\nspeedup = nan\n', "NaN"),
        ('[[speedup]]\nselect = "category:embedding"\nspeedup = "fast"\n', "number"),
        ("[[speedup]]\nspeedup = 2\n", "no selector"),
        ('[[speedup]]\nselect = "category:embedding"\ncategory = "x"\nspeedup = 2\n', "not both"),
        ('[[speedup]]\nselect = "category:embedding"\nspeedup = 2\nverified = "maybe"\n', "verified"),
        ('[[speedup]]\nselect = "category:embedding"\nspedup = 2\n', "unknown key"),
        ("nothing = 1\n", r"\[\[speedup\]\]"),
        ("[[speedup\n", "invalid TOML"),
    ],
)
def test_bad_toml_files(tmp_path, body, match):
    p = tmp_path / "s.toml"
    p.write_text(body)
    with pytest.raises(UserError, match=match):
        load_speedup_file(p)


def test_json_and_csv_files(tmp_path):
    j = tmp_path / "s.json"
    j.write_text(json.dumps({"speedups": [{"select": "op:aten::layer_norm", "speedup": 2, "source": "x"}]}))
    assert load_speedup_file(j).entries[0].speedup == 2.0
    j.write_text(json.dumps([{"problem": "23_Softmax", "speedup": 1.3}]))
    assert str(load_speedup_file(j).entries[0].selector) == "problem:23_Softmax"
    c = tmp_path / "s.csv"
    c.write_text(
        "# comment\nselect,speedup,verified,source\ncategory:embedding,1.552,yes,paper\n"
        '"op:aten::mm & kernel:a,b",2,,\n'
    )
    es = load_speedup_file(c).entries
    assert es[0].verified is True and es[0].source == "paper"
    assert es[1].selector.atoms[1].pattern == "a,b" and es[1].verified is None
    c.write_text("select,speedup\ncategory:embedding,\n")
    with pytest.raises(UserError, match="line 2: missing speedup"):
        load_speedup_file(c)
    c.write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="header"):
        load_speedup_file(c)


def _verify_result(problem, verdict, speedup):
    return {
        "problem": problem,
        "verdict": verdict,
        "speedup": speedup,
        "speedup_fp32": speedup,
        "memory_ratio": 1.0,
        "checks": [],
    }


def test_verify_json_single_and_suite(tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps(_verify_result("01_EmbeddingBagSum", "pass", 1.6)))
    sf = load_speedup_file(one)
    assert sf.kind == "verify" and len(sf.entries) == 1
    e = sf.entries[0]
    assert str(e.selector) == "problem:01_EmbeddingBagSum" and e.verified is True and e.speedup == 1.6
    suite = tmp_path / "suite.json"
    suite.write_text(
        json.dumps(
            {
                "tool": "headroom verify",
                "version": 1,
                "results": [
                    _verify_result("01_EmbeddingBagSum", "pass", 1.6),
                    _verify_result("04_DotInteraction", "fail", 3.0),
                    _verify_result("05_DotInteractionBackward", "error", None),
                    _verify_result("09_JaggedSum", "pass", None),
                ],
            }
        )
    )
    sf = load_speedup_file(suite)
    assert [str(e.selector) for e in sf.entries] == ["problem:01_EmbeddingBagSum"]
    text = " | ".join(sf.warnings)
    assert "04_DotInteraction" in text and "'fail'" in text and "05_DotInteractionBackward" in text
    assert "09_JaggedSum" in text  # a pass without a speedup is skipped, loudly
    d = load_distribution(suite)
    assert d.n == 4 and d.win_rate == 0.25 and d.median_win == 1.6
    assert d.effective().tolist() == [1.6, 1.0, 1.0, 1.0]


def test_distribution_from_numbers(tmp_path):
    p = tmp_path / "d.json"
    p.write_text("[1.2, 0.8, 2.0, 1.0]")
    d = load_distribution(p)
    assert d.win_rate == 0.5 and d.median_win == pytest.approx(1.6)
    assert d.effective().tolist() == [1.2, 1.0, 2.0, 1.0]
    assert Distribution((None, None)).win_rate == 0.0


def test_unknown_file_type_and_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_speedup_file(tmp_path / "nope.toml")
    p = tmp_path / "s.yaml"
    p.write_text("a: 1\n")
    with pytest.raises(UserError, match="unknown speedup file type"):
        load_speedup_file(p)


def test_example_file_loads():
    sf = load_speedup_file(REPO / "examples" / "speedups.toml")
    assert len(sf.entries) >= 3 and sf.entries[0].speedup == 1.552


# --- the problem mapping ----------------------------------------------------------------


DLRM = [
    "01_EmbeddingBagSum",
    "02_WeightedMeanEmbeddingBag",
    "03_Int8RowwiseEmbeddingBag",
    "04_DotInteraction",
    "05_DotInteractionBackward",
    "06_DCNv2LowRankCross",
    "07_FMInteraction",
    "08_JaggedToPaddedDense",
    "09_JaggedSum",
    "10_JaggedSoftmax",
    "11_PermutePooledEmbeddings",
    "12_AttentionPooling",
]


def test_problem_mapping_covers_kernelbench_and_dlrm_bench():
    pm = load_problems()
    suites = pm.suites()
    assert len(suites["KernelBench/level1"]) >= 30
    assert sorted(suites["DLRM-Bench"]) == DLRM
    for name in ("23_Softmax", "40_LayerNorm", "19_ReLU", "26_GELU_", "36_RMSNorm_", "95_CrossEntropyLoss"):
        assert name in pm
    # Lenient lookups: case, .py, trailing underscore, and the bare name when unique.
    assert pm.get("23_softmax.py").name == "23_Softmax"
    assert pm.get("26_GELU").name == "26_GELU_"
    assert pm.get("LayerNorm").name == "40_LayerNorm"
    with pytest.raises(UserError, match="did you mean 23_Softmax"):
        pm.get("23_Softmaxx")


def test_user_problem_file_extends_mapping(tmp_path):
    p = tmp_path / "p.toml"
    p.write_text('[problem."99_MyFusedNorm"]\nsuite = "mine"\nselect = ["kernel:my_norm"]\n')
    pm = load_problems(p)
    assert "99_MyFusedNorm" in pm and "23_Softmax" in pm
    p.write_text('[problem."x"]\nselect = ["problem:23_Softmax"]\n')
    with pytest.raises(UserError, match="cannot select another problem"):
        load_problems(p)


def test_phase_selector():
    ev = pd.DataFrame(
        {
            "name": ["k"] * 5,
            "op": ["aten::bmm", "aten::bmm", "aten::bmm", "aten::add_", "aten::threshold_backward"],
            "top_op": [
                "aten::bmm",
                "autograd::engine::evaluate_function: BmmBackward0",
                "headroom/backward",
                "headroom/optimizer",
                "aten::threshold_backward",
            ],
            "annotation": ["", "", "", "", ""],
            "module": ["model.inter_arch"] * 5,
            "module_stack": ["DLRM/InteractionArch"] * 5,
        }
    )
    assert select(ev, "phase:forward").tolist() == [True, False, False, False, False]
    assert select(ev, "phase:backward").tolist() == [False, True, True, False, True]
    assert select(ev, "phase:optimizer").tolist() == [False, False, False, True, False]
    # a KernelBench op problem selects the op wherever it runs; a DLRM model part only its forward
    assert select(ev, "problem:3_Batched_matrix_multiplication & category:*").sum() == 0  # no category column
    assert select(ev, "op:aten::bmm").sum() == 3
    assert select(ev, "problem:04_DotInteraction").tolist() == [True, False, False, False, False]
    with pytest.raises(UserError):
        parse_selector("phase:inference")


def test_dlrm_backward_problem_selects_the_index_backward(events):
    ev = pd.DataFrame(
        {
            "name": ["indexing_backward_kernel", "DeviceRadixSortOnesweepKernel", "index_elementwise_kernel"],
            "op": ["aten::_index_put_impl_", "aten::_index_put_impl_", "aten::index"],
            "top_op": ["autograd::engine::evaluate_function: IndexBackward0"] * 2 + ["aten::index"],
            "category": ["indexing", "sort", "indexing"],
            "addressable": [True] * 3,
            "dur": [5.0, 3.0, 1.0],
            "module": ["dlrm.inter_arch"] * 3,
            "module_stack": ["DLRM/InteractionArch"] * 3,
        }
    )
    assert select(ev, "problem:05_DotInteractionBackward").tolist() == [True, True, False]
    assert select(ev, "problem:04_DotInteraction").tolist() == [False, False, True]
    # the same ops outside the interaction module (a transformer's bmm, a mask's index_put_) are no part of it
    other = ev.assign(module="model.layers.0.self_attn.rotary_emb", module_stack="")
    assert not select(other, "problem:05_DotInteractionBackward").any()
    assert not select(other, "problem:04_DotInteraction").any()


# --- resolution: no match, overlaps, strictness ------------------------------------------------


def test_resolve_factors_and_match_counts(events):
    entries = [parse_cli_speedup("category:embedding=1.5"), parse_cli_speedup("op:aten::layer_norm=2")]
    r = resolve(entries, events)
    assert r.factors.tolist() == [1.0, 1.5, 2.0, 1.0, 1.0]
    assert r.warnings == []
    m = r.matches[0]
    assert (m.kernels, m.us, m.addressable_us, m.applied_us) == (1, 60.0, 60.0, 60.0)
    assert m.top[0][0] == "EmbeddingBag_updateOutputKernel"


def test_resolve_warns_on_no_match_and_overlap_first_wins(events):
    entries = [
        parse_cli_speedup("category:addressable=1.5"),
        parse_cli_speedup("category:embedding=3"),
        parse_cli_speedup("category:conv=2"),
    ]
    r = resolve(entries, events)
    assert r.factors.tolist() == [1.0, 1.5, 1.5, 1.5, 1.0]
    assert any(
        "overlaps category:addressable=1.5 on 1 kernel(s)" in w and "first entry's factor 1.5" in w for w in r.warnings
    )
    assert any("category:conv=2" in w and "matches no kernel" in w for w in r.warnings)
    assert r.matches[1].applied_kernels == 0 and r.matches[1].kernels == 1
    with pytest.raises(UserError, match="strict mode"):
        resolve(entries, events, strict=True)


def test_resolve_duplicate_selector_warns(events):
    r = resolve([parse_cli_speedup("category:embedding=1.5"), parse_cli_speedup("category:embedding=2")], events)
    assert any("repeats the selector" in w and "using the first, 1.5" in w for w in r.warnings)
    assert r.factors[1] == 1.5


def test_unknown_problem_is_an_error_but_unknown_verified_problem_is_skipped(events, tmp_path):
    with pytest.raises(UserError, match="unknown problem"):
        resolve([parse_cli_speedup("problem:77_Nope=2")], events)
    suite = tmp_path / "suite.json"
    suite.write_text(
        json.dumps({"tool": "headroom verify", "version": 1, "results": [_verify_result("77_Nope", "pass", 2.0)]})
    )
    entries, warnings = collect_entries([], [suite])
    r = resolve(entries, events)
    assert r.factors.tolist() == [1.0] * 5
    assert any("77_Nope" in w and "skipped" in w for w in r.warnings)


def test_cli_entries_come_first(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[[speedup]]\nselect = "category:embedding"\nspeedup = 1.1\n')
    entries, _ = collect_entries(["category:embedding=3"], [p])
    assert [e.speedup for e in entries] == [3.0, 1.1]


def test_verify_suite_with_several_candidates_per_problem(tmp_path):
    rs = [
        dict(_verify_result("01_EmbeddingBagSum", "pass", 1.3), candidate="c/01_a.py"),
        dict(_verify_result("01_EmbeddingBagSum", "pass", 1.7), candidate="c/01_b.py"),
        dict(_verify_result("01_EmbeddingBagSum", "fail", 283.0), candidate="c/01_zeros.py"),
        dict(_verify_result("04_DotInteraction", "fail", 2.0), candidate="c/04_a.py"),
    ]
    p = tmp_path / "suite.json"
    p.write_text(json.dumps({"tool": "headroom verify", "version": 1, "results": rs}))
    sf = load_speedup_file(p)
    assert [(str(e.selector), e.speedup) for e in sf.entries] == [("problem:01_EmbeddingBagSum", 1.7)]
    assert any("2 passing candidates; using the fastest (01_b.py) at 1.7x" in w for w in sf.warnings)
    assert any("01_EmbeddingBagSum (01_zeros.py)" in w for w in sf.warnings)
    d = load_distribution(p)
    assert d.n == 2 and d.win_rate == 0.5 and d.median_win == 1.7  # per problem, not per candidate


def test_call_us_is_read_from_files_and_needs_launches(tmp_path):
    from headroom.projection.speedups import load_speedup_file

    p = tmp_path / "s.toml"
    p.write_text('[[speedup]]\nselect = "module:RMSNorm"\nspeedup = 2.4\nlaunches = 1\ncall_us = 42.5\n')
    e = load_speedup_file(p).entries[0]
    assert (e.launches, e.call_us) == (1, 42.5) and plain(e)["call_us"] == 42.5
    assert e.label.endswith(",launches=1,call_us=42.5")
    for body, msg in (
        ("call_us = 42.5\n", "call_us needs launches"),
        ("launches = 1\ncall_us = -1\n", "call_us must be a number of microseconds >= 0"),
        ('launches = 1\ncall_us = "fast"\n', "call_us must be a number of microseconds >= 0"),
    ):
        p.write_text('[[speedup]]\nselect = "module:RMSNorm"\nspeedup = 2.4\n' + body)
        with pytest.raises(UserError, match=msg):
            load_speedup_file(p)
