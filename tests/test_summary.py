"""A trace's summary (headroom/report/summary.py): classify and report print the same from a kept summary as from
the trace, read it only while it is the summary of this trace read this way, and keep none they cannot follow."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import SHIPPED_TRACES

TRACES = [SHIPPED_TRACES / "bert-base.infer.json.gz", SHIPPED_TRACES / "dlrm.train.json.gz"]
COMMANDS = [
    ["classify"],
    ["classify", "--json"],
    ["classify", "--all"],
    ["classify", "--json", "--all"],
    ["classify", "--whole-trace"],
    ["report"],
    ["report", "--json"],
]


@pytest.fixture
def cached(tmp_path, monkeypatch):
    """Every trace cached (whatever its size) in a folder of the test's own; returns that folder."""
    monkeypatch.setenv("HEADROOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HEADROOM_CACHE_MIN_BYTES", "0")
    return tmp_path / "cache"


def _summaries(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.summary-*.json"))


def _no_trace_read(monkeypatch):
    """From now on, reading a trace fails the test (a command must print a kept summary)."""
    import headroom.trace.load

    def refuse(*args, **kwargs):
        raise AssertionError("a trace was read although its summary was kept")

    monkeypatch.setattr(headroom.trace.load, "iter_traces", refuse)


@pytest.mark.parametrize("words", COMMANDS)
def test_a_kept_summary_prints_what_the_trace_printed(headroom, cached, monkeypatch, words):
    first = headroom(*words, *TRACES)
    assert first.returncode == 0, first.stderr
    assert len(_summaries(cached)) == 2
    _no_trace_read(monkeypatch)
    again = headroom(*words, *TRACES)
    assert (again.returncode, again.stdout, again.stderr) == (0, first.stdout, first.stderr)


def test_a_summary_is_kept_by_any_command_that_reads_the_trace(headroom, cached, monkeypatch):
    fresh = headroom("classify", "--json", TRACES[0])
    shutil.rmtree(cached)
    assert headroom("targets", TRACES[0]).returncode == 0
    assert len(_summaries(cached)) == 1
    _no_trace_read(monkeypatch)
    assert headroom("classify", "--json", TRACES[0]).stdout == fresh.stdout


def test_other_rules_or_another_analysed_time_are_not_the_kept_summary(headroom, cached, tmp_path):
    kept = headroom("classify", "--json", TRACES[0])
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\ncategory = "gemm"\nkind = "kernel"\nkernel = "."\n')
    other = headroom("classify", "--json", "--rules", rules, TRACES[0])
    assert other.returncode == 0 and other.stdout != kept.stdout
    assert '"name": "gemm", "us"' in other.stdout and len(other.stdout.split('"name": ')) < len(
        kept.stdout.split('"name": ')
    )
    assert headroom("classify", "--json", "--rules", rules, TRACES[0]).stdout == other.stdout
    whole = headroom("classify", "--json", "--whole-trace", TRACES[0])
    assert '"basis": "whole trace"' in whole.stdout and '"basis": "whole trace"' not in kept.stdout
    assert len(_summaries(cached)) == 3
    assert headroom("classify", "--json", TRACES[0]).stdout == kept.stdout


@pytest.mark.parametrize("damage", ["not json", '{"source": 1}', "no categories"])
def test_a_damaged_summary_is_made_again(headroom, cached, damage):
    fresh = headroom("report", "--json", TRACES[0])
    [kept] = _summaries(cached)
    if damage == "no categories":  # a summary in form, its document short of what classify prints
        value = json.loads(kept.read_text())
        del value["document"]["categories"]
        damage = json.dumps(value)
    kept.write_text(damage)
    for words in (["report", "--json"], ["classify"]):
        again = headroom(*words, TRACES[0])
        assert again.returncode == 0 and again.stdout, again.stderr
    assert headroom("report", "--json", TRACES[0]).stdout == fresh.stdout
    [remade] = _summaries(cached)
    assert remade.read_text() != damage


def test_a_changed_trace_is_read_again(headroom, cached, tmp_path):
    trace = tmp_path / "t.json.gz"
    shutil.copy(TRACES[0], trace)
    first = headroom("classify", "--json", trace)
    shutil.copy(TRACES[1], trace)
    second = headroom("classify", "--json", trace)
    assert second.returncode == 0 and second.stdout != first.stdout
    assert second.stdout == headroom("classify", "--json", "--no-cache", trace).stdout


def test_the_path_as_given_names_the_trace(headroom, cached):
    relative = TRACES[0].relative_to(SHIPPED_TRACES.parent)
    assert headroom("classify", "--json", relative).returncode == 0
    dotted = headroom("classify", "--json", f"./{relative}")
    assert dotted.returncode == 0 and f'"trace": "{relative}"' in dotted.stdout  # Path("./x") is "x"
    absolute = headroom("classify", "--json", TRACES[0])
    assert f'"trace": "{TRACES[0]}"' in absolute.stdout


def test_no_summary_is_kept_without_the_cache_or_beside_a_graph_capture(headroom, cached):
    assert headroom("classify", "--no-cache", TRACES[0]).returncode == 0
    assert _summaries(cached) == []
    graphed = SHIPPED_TRACES / "graphs" / "gpt2-xl.decode-graphs.json.gz"  # its manifest names its capture
    assert headroom("classify", graphed).returncode == 0
    assert _summaries(cached) == []
