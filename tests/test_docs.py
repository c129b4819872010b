"""The documentation's code runs as written: README's "Adding a workload" points at the example in
docs/workloads.md, which must register a workload through the plug-in API."""

from __future__ import annotations

import re
from pathlib import Path

from headroom.profile.registry import get_workload, load_workload_file
from headroom.profile.workload import Options

REPO = Path(__file__).resolve().parents[1]


def test_readme_points_at_the_workload_example():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Adding a workload"):]
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
    assert (cfg.mode, cfg.batch, cfg.dtype) == ("infer", 64, "float32")      # its CPU policy
    assert spec.resolve(Options(), "cuda").batch == 8192
    assert spec.param_count_meta() == 2 * 4096 * 16384 + 16384 + 4096


# Docs describe the system as it is; its history is CHANGELOG.md (and git). No issue numbers, commit hashes or
# lab-notebook time words in the docs, README.md or the package's comments and docstrings.
_HISTORY = re.compile(r"\b(previous|last|this|earlier) (stop|session)\b|\blast time\b|\bsuperseded\b", re.I)
_ISSUE = re.compile(r"(?<![\w/.-])#\d{1,4}(?!\w)|\bissues? #?\d+\b", re.I)     # not pytorch/pytorch#123, #252525
_HASH = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,12}(?![\w-])")


def _described_files() -> list[Path]:
    docs = sorted((REPO / "docs").glob("*.md"))
    return docs + [REPO / "README.md"] + sorted((REPO / "headroom").rglob("*.py")) + sorted((REPO / "workloads").glob("*.py"))


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


def test_benchmarks_page_dates_every_benchmark_and_its_raw_files_exist():
    """docs/benchmarks.md: each benchmark's section says when and on which machine (the page's machine unless
    it names another) it was measured; every raw file it names is under benchmarks/results/, named by what
    it measures, and no raw result lies elsewhere in benchmarks/."""
    text = (REPO / "docs" / "benchmarks.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    measured = [s for s in sections if not s.startswith(("The trace shapes", "Cross-check"))]
    assert len(measured) >= 9
    for s in measured:
        title = s.splitlines()[0]
        assert re.search(r"\b2-core machine\b.*\b20\d\d-\d\d-\d\d\b|\b20\d\d-\d\d-\d\d\b.*machine", s, re.S), title
    named = set(re.findall(r"benchmarks/results/([\w.{},-]+\.json)", text)) | set(re.findall(r"`([\w.{},-]+\.json)`", text))
    files = set()
    for n in named:
        m = re.match(r"(.*)\{(.*)\}(.*)", n)
        files |= {m.group(1) + x + m.group(3) for x in m.group(2).split(",")} if m else {n}
    files = {f for f in files if "SHAPE" not in f and "SIZE" not in f}
    missing = sorted(f for f in files if not (REPO / "benchmarks" / "results" / f).is_file())
    assert not missing and len(files) >= 15, missing
    assert not list((REPO / "benchmarks").glob("*.json"))
