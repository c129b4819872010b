"""The documentation's code runs as written: README's "Adding a workload" points at the example in
docs/workloads.md, which must register a workload through the plug-in API."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from headroom.profile.registry import get_workload, load_workload_file
from headroom.profile.workload import Options

REPO = Path(__file__).resolve().parents[1]


def test_readme_points_at_the_workload_example():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Adding a workload") :]
    assert "workloads/" in section and "docs/workloads.md" in section and "--workload-file" in section


def test_the_workload_example_registers_as_written(tmp_path):
    doc = (REPO / "docs" / "workloads.md").read_text()
    code = re.search(r"```python\n(# my_mlp\.py.*?)```", doc, re.S).group(1)
    path = tmp_path / "my_mlp.py"
    path.write_text(code)
    added = load_workload_file(path)
    assert [s.name for s in added] == ["my-mlp"] and get_workload("my-mlp") is added[0]
    spec = added[0]
    cfg = spec.resolve(Options(), "cpu")
    assert (cfg.mode, cfg.batch, cfg.dtype) == ("infer", 64, "float32")  # its CPU policy
    assert spec.resolve(Options(), "cuda").batch == 8192
    assert spec.param_count_meta() == 2 * 4096 * 16384 + 16384 + 4096


# Docs describe the system as it is; its history is CHANGELOG.md (and git). No issue numbers, commit hashes or
# lab-notebook time words in the docs, README.md or the package's comments and docstrings.
_HISTORY = re.compile(r"\b(previous|last|this|earlier) (stop|session)\b|\blast time\b|\bsuperseded\b", re.I)
_ISSUE = re.compile(r"(?<![\w/.-])#\d{1,4}(?!\w)|\bissues? #?\d+\b", re.I)  # not pytorch/pytorch#123, #252525
_HASH = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,12}(?![\w-])")


def _described_files() -> list[Path]:
    docs = sorted((REPO / "docs").glob("*.md"))
    return (
        docs
        + [REPO / "README.md"]
        + sorted((REPO / "headroom").rglob("*.py"))
        + sorted((REPO / "workloads").glob("*.py"))
    )


def test_docs_and_comments_carry_no_history():
    found = []
    for path in _described_files():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for what, rx in (("issue number", _ISSUE), ("commit hash", _HASH), ("history word", _HISTORY)):
                m = rx.search(line)
                if m:
                    found.append(f"{path.relative_to(REPO)}:{n}: {what} {m.group(0)!r}")
    assert not found, "\n".join(found[:40])


def test_the_history_checks_catch_what_they_are_for():
    assert _ISSUE.search("as issue #14 asks") and _ISSUE.search("(#25)") and not _ISSUE.search("pytorch/pytorch#195068")
    assert not _ISSUE.search('color "#252525"')
    assert _HASH.search("measured at add9ee0 against 963b2e3") and not _HASH.search("a 4096-byte page, 1e-9, deadbeef")
    assert _HISTORY.search("the previous stop's numbers") and _HISTORY.search("Superseded by the section above")


def test_changelog_keeps_a_changelog():
    text = (REPO / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n") and "[Keep a Changelog](https://keepachangelog.com/en/1.1.0/)" in text
    assert "## [Unreleased]" in text
    sections = re.findall(r"^### (\w+)$", text, re.M)
    assert sections and set(sections) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_benchmarks_page_says_what_ran_where_and_its_raw_files_exist():
    """docs/benchmarks.md: each benchmark's section names its machine (the page's machine unless it names
    another) and the command that measured it; every raw file it names is under benchmarks/results/, named by
    what it measures, and no raw result lies elsewhere in benchmarks/."""
    text = (REPO / "docs" / "benchmarks.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    measured = [s for s in sections if not s.startswith(("The trace shapes", "Cross-check"))]
    assert len(measured) >= 9
    for s in measured:
        title = s.splitlines()[0]
        assert re.search(r"\b2-core machine\b|\bH200\b", s), title
        assert re.search(r"(?m)(?:^|`)(?:\w+=\S+ )*(?:python3?|\.venv/bin/python|bash|headroom) ", s), title
    named = set(re.findall(r"benchmarks/results/([\w.{},-]+\.json)", text)) | set(
        re.findall(r"`([\w.{},-]+\.json)`", text)
    )
    files = set()
    for n in named:
        m = re.match(r"(.*)\{(.*)\}(.*)", n)
        files |= {m.group(1) + x + m.group(3) for x in m.group(2).split(",")} if m else {n}
    files = {f for f in files if "SHAPE" not in f and "SIZE" not in f}
    missing = sorted(f for f in files if not (REPO / "benchmarks" / "results" / f).is_file())
    assert not missing and len(files) >= 15, missing
    assert not list((REPO / "benchmarks").glob("*.json"))


# The docs read as docs: no run history (dates, times of day, "call 5", "the earlier run": that is CHANGELOG.md's),
# and short sentences. Both are measured on README.md and docs/*.md as they are.
_RUN_HISTORY = re.compile(
    r"\b20\d\d-\d\d-\d\d\b|\bUTC\b|\bcalls? \d+\b|\bearlier call\b"
    r"|\b(?:last|previous|earlier|this) (?:run|session|stop|time)s?\b|\bthe earlier\b",
    re.I,
)
_PROSE_SKIP = ("|", "#", "<", "![")


def _prose(text: str) -> list[str]:
    """The paragraphs and list items of a Markdown text, code blocks, tables, headings and HTML left out."""
    blocks, current, fence = [], [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = not fence
            line = ""
        if fence or not stripped or stripped.startswith(_PROSE_SKIP) or re.match(r"[-*] |\d+\. ", stripped):
            if current:
                blocks.append(" ".join(current))
            current = []
            if fence or not stripped or stripped.startswith(_PROSE_SKIP):
                continue
            stripped = re.sub(r"^(?:[-*]|\d+\.) ", "", stripped)
        current.append(stripped)
    if current:
        blocks.append(" ".join(current))
    return blocks


def sentence_lengths(text: str) -> list[int]:
    """Words per sentence: a sentence ends at . ! or ? followed by a space and a capital, a backquote, a
    parenthesis or a quote, or at the end of its paragraph or list item; fragments under 3 words are dropped."""
    out = []
    for block in _prose(text):
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(*\"])", block):
            n = len(re.findall(r"[A-Za-z0-9`]\S*", s))
            if n >= 3:
                out.append(n)
    return out


def _docs() -> list[Path]:
    return [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))


def history_lines() -> list[str]:
    return [
        f"{p.relative_to(REPO)}:{n}: {line.strip()[:100]}"
        for p in _docs()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if _RUN_HISTORY.search(line)
    ]


def test_docs_carry_no_run_history():
    found = history_lines()
    assert not found, f"{len(found)} lines of run history (CHANGELOG.md holds it):\n" + "\n".join(found[:60])


def test_docs_sentences_are_short():
    lengths = [n for p in _docs() for n in sentence_lengths(p.read_text())]
    assert len(lengths) > 500
    assert statistics.median(lengths) <= 25, f"median sentence {statistics.median(lengths)} words"


def test_the_prose_measures_measure_what_they_say():
    text = (
        "# Title\n\nOne two three four. Five six seven\neight nine.\n\n```\nnot prose at all here.\n```\n"
        "| a | table row here |\n- A list item of six words.\n- Another item (with `code`). Then more words.\n"
    )
    assert sentence_lengths(text) == [4, 5, 6, 4, 3]
    for line in (
        "measured on 2026-12-04",
        "at 20:50 UTC",
        "in call 5 of the run",
        "the earlier run's numbers",
        "as last time",
    ):
        assert _RUN_HISTORY.search(line), line
    for line in ("a second command on a 260 MB trace", "calls per step", "recall 5", "a 2.4x speedup"):
        assert not _RUN_HISTORY.search(line), line


def test_docs_pages_show_their_commands_current_output():
    """Every docs page's `$ headroom ...` block is what the command prints now (scripts/readme_output.py)."""
    import os
    import subprocess
    import sys

    pages = [p for p in sorted((REPO / "docs").glob("*.md")) if re.search(r"^```\n\$ headroom ", p.read_text(), re.M)]
    assert pages
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "readme_output.py"),
            "--check",
            *[str(x.relative_to(REPO)) for x in pages],
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 0, p.stderr


def test_readme_walks_the_five_tasks_in_its_first_80_lines():
    head = "\n".join((REPO / "README.md").read_text().splitlines()[:80])
    shown = re.findall(r"^\$ headroom (\w+)", head, re.M)
    assert shown == ["classify", "targets", "project", "verify", "plot"], shown
    labels = re.findall(r"^\*\*\d\. (\w+)\.\*\*", head, re.M)
    assert labels == ["Profile", "Targets", "Project", "Verify", "Plot"], labels
    assert "## Install" in head and "headroom profile" in head
