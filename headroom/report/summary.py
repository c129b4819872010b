"""What `classify` and `report` print of one analysed trace, as plain data: the trace's summary.

A summary holds the `classify --json` document with every kernel, the trace's row of `report`'s table and
the notes and warnings its reading printed. `classify` and `report` print from it, as text and as JSON, on a
first read and on a later one alike. It is kept in the trace's cache entry beside the analysis it comes from
(headroom/trace/stored.py), named by that analysis (rules, policy, analysed time, the analysis' code) and by
the code that makes and prints it. A later `classify` or `report` on the unchanged trace finds it and prints
without loading the trace or the analysis, and without importing numpy or pandas, whose imports are most of
such a command's time (docs/benchmarks.md, "A different second command").

This module imports neither: the functions that make a summary from an Analysis import what they need.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headroom.report.report_columns import SUMMARY_COLUMNS
from headroom.trace.analysis_terms import label_batches, run_model
from headroom.trace.cache_key import Key, code_version, key

if TYPE_CHECKING:
    from headroom.trace.analysis import Analysis
    from headroom.trace.classify import Policy, Rule
    from headroom.trace.read_options import ReadOptions

_HERE = Path(__file__).parent
# The code that makes a summary's numbers and labels from an Analysis, and this module (the analysis' own
# code is in its name: stored._VERSION).
_VERSION = code_version(
    _HERE / "summary.py",
    _HERE / "tables.py",
    _HERE.parent / "trace" / "analysis_result.py",
    _HERE.parent / "trace" / "analysis_terms.py",
    _HERE.parent / "trace" / "layers.py",
    _HERE.parent / "data" / "categories.toml",
)


@dataclass
class Summary:
    """One analysed trace as `classify` and `report` print it. `document`: the `classify --json` body with
    every kernel (`Analysis.to_dict(all_kernels=True)`); `row`: its row of `report`'s table (SUMMARY_COLUMNS);
    `model`: the run its manifest names ("" without one: `report` adds the batch size to the labels of one
    model's runs at several); `notes`: the lines its reading warned, without the source's name."""

    source: str
    document: dict[str, Any]
    row: dict[str, Any]
    model: str
    notes: list[str]


def of(a: Analysis) -> Summary:
    """The summary of an analysis, as a later command reads it back (a JSON round trip through the one JSON
    writer's text, NaN as null: the first command prints what the later ones will)."""
    from headroom.jsonio import dumps
    from headroom.report.tables import summary_row

    made = {
        "source": a.source,
        "document": a.to_dict(all_kernels=True),
        "row": summary_row(a),
        "model": run_model(a.manifest),
        "notes": [*a.notes, *a.warnings],
    }
    return _summary(json.loads(dumps(made)))


def classify_body(s: Summary, all_kernels: bool) -> dict[str, Any]:
    """The `classify --json` body (with `all_kernels`, its `kernels` key)."""
    return s.document if all_kernels else {k: v for k, v in s.document.items() if k != "kernels"}


def report_rows(summaries: list[Summary]) -> list[dict[str, Any]]:
    """`report`'s table, one row per trace (`label_batches`)."""
    return label_batches([s.row for s in summaries], [s.model for s in summaries])


def report_document(
    rows: list[dict[str, Any]], rank_sets: Sequence[dict[str, Any]], failed: Sequence[str]
) -> dict[str, Any]:
    """The `headroom report --json` document (docs/cli.md, `headroom.report/1`), less its schema key: the traces'
    rows (`report_rows`), each directory of ranks (rank_tables.rank_set_record) and the paths not read."""
    return {"traces": list(rows), "rank_sets": list(rank_sets), "failed": list(failed)}


# --- kept in the trace's cache entry -------------------------------------------------------------


def fetch(path: str | os.PathLike, read: ReadOptions, rules: list[Rule], policy: Policy) -> Summary | None:
    """The summary a command wrote for this file read this way, if the file is unchanged since; else None
    (also for what a summary is never kept for: a stream, a --graph-source, caching off)."""
    where = _place(path, read, rules, policy)
    if where is None:
        return None
    try:
        s = _summary(json.loads(where.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError):
        where.unlink(missing_ok=True)  # damaged: written again by the command that reads the trace
        return None
    return s if s.source == str(path) else None  # another spelling of the path: its own name in the output


def kept(path: str | os.PathLike, read: ReadOptions, rules: list[Rule], policy: Policy) -> bool:
    """Whether a summary for this file read this way is kept (or none can be: nothing to make then)."""
    where = _place(path, read, rules, policy)
    return where is None or where.exists()


def store(s: Summary, a: Analysis, read: ReadOptions, rules: list[Rule], policy: Policy) -> None:
    """Keep `s` (of `a`) in its trace's cache entry; nothing when the trace has no entry or the analysis used a
    CUDA graph's capture trace (its summary would have to follow that file too)."""
    from headroom.errors import UserError
    from headroom.jsonio import write_json
    from headroom.trace.graphs import capture_trace_of

    if a.trace is None or a.trace.cache_key is None or capture_trace_of(s.source, a.metadata) is not None:
        return
    where = _place(s.source, read, rules, policy, a.trace.cache_key)
    if where is None or where.exists() or not (where.parent / "header.json").exists():
        return
    try:
        write_json(where, {f: getattr(s, f) for f in _FIELDS}, indent=None)
    except UserError:  # a full disk, a read-only cache, the entry removed meanwhile: computed again next time
        pass


_FIELDS = ("source", "document", "row", "model", "notes")
# What the commands read of a summary's document (Analysis.to_dict(all_kernels=True)).
_DOCUMENT_KEYS = frozenset(
    ("trace", "mode", "basis", "device", "num_steps", "step_us", "total_us", "busy_us", "wall_us", "idle_fraction")
    + ("addressable_us", "addressable_fraction", "categories", "steps", "unknown", "kernels")
)


def _place(
    path: str | os.PathLike, read: ReadOptions, rules: list[Rule], policy: Policy, k: Key | None = None
) -> Path | None:
    from headroom.trace import stored

    if not read.use_cache or read.graph_source is not None or not _regular_file(path):
        return None
    k = k or key(Path(path), read.lenient)
    if k is None:
        return None
    return k.entry / f"{stored.name_of(rules, policy, read.whole_trace, read.window)}.summary-{_VERSION}.json"


def _regular_file(path: str | os.PathLike) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _summary(value: Any) -> Summary:
    """A Summary from its JSON object; TypeError or KeyError when it is not one."""
    if not isinstance(value, dict) or set(value) != set(_FIELDS):
        raise KeyError("not a summary")
    s = Summary(**value)
    texts_ok = isinstance(s.source, str) and isinstance(s.model, str) and all(isinstance(n, str) for n in s.notes)
    if not (texts_ok and isinstance(s.document, dict) and isinstance(s.row, dict) and isinstance(s.notes, list)):
        raise TypeError("not a summary")
    if not _DOCUMENT_KEYS <= set(s.document) or set(s.row) != set(SUMMARY_COLUMNS):
        raise KeyError("not a summary")
    return s
