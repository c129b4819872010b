"""The numbers of the HTML report (`headroom report --html FILE`), as one JSON-ready document.

`page_numbers` adds to the `headroom report --json` document (rank_tables.report_body) what the page shows beyond
the summary table: category shares per workload (the addressable-fraction figure), the top targets
(the `targets --json` body of each trace; with `--roofline` the `targets --roofline --json` one), the
projection of the given speedups (the `project --json` body) and the per-rank views of a directory of ranks.
Every number comes from the existing tables
(report/tables.py, projection/targets.py, projection/project.py, trace/ranks.py); a number the page shows
that none of them has (a per-step value of a total) is computed here and stored in the document, so
that headroom/report/html.py draws the page from the document alone and every number on it is one of
the document's (tests/test_report_html.py checks this).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headroom.jsonio import plain
from headroom.projection.targets import DEFAULT_SPEEDUP, MODULE_KINDS, module_ranges_missing, targets, targets_dict
from headroom.report.rank_tables import report_body
from headroom.report.tables import addressable_summary, category_fractions
from headroom.trace.analysis import Analysis

if TYPE_CHECKING:  # annotations only
    from headroom.projection.problems import ProblemMap
    from headroom.projection.speedups import Speedup
    from headroom.trace.rank_set import RankSet

DEFAULT_TOP = 10
TARGET_GROUPINGS = ("op", "module")


def _labels(analyses: Sequence[Analysis]) -> list[str]:
    """Each trace's label, made unique (two traces of one workload: the second names its file)."""
    labels = [a.label for a in analyses]
    return [lab if labels.count(lab) == 1 else f"{lab} ({a.source})" for lab, a in zip(labels, analyses)]


def _categories(analyses: Sequence[Analysis]) -> dict[str, Any]:
    """Per workload: its category shares of kernel time (in the figure's stacking order) and the
    addressable sum, as `headroom plot --figure addressable --basis kernel` draws them."""
    if not analyses:
        return {"basis": "kernel", "workloads": []}
    labels = _labels(analyses)
    fr = category_fractions(analyses, labels, "kernel")
    summary = addressable_summary(analyses, labels, "kernel").set_index("workload")
    workloads = []
    for lab, a in zip(labels, analyses):
        rows = fr[fr["workload"] == lab]
        workloads.append(
            {
                "workload": lab,
                "trace": a.source,
                "mode": a.mode,
                "addressable_fraction": float(summary.loc[lab, "addressable_fraction"]),
                "bars": [
                    {
                        "category": r.category,
                        "addressable": bool(r.addressable),
                        "us": float(r.us),
                        "fraction": float(r.fraction),
                    }
                    for r in rows.itertuples(index=False)
                ],
            }
        )
    return {"basis": "kernel", "workloads": workloads}


def _targets(a: Analysis, speedup: float, top: int, roofline: bool = False, peaks: str | None = None) -> dict[str, Any]:
    if roofline:  # the `targets --roofline --replay-top 0` body: each row's bound against the device's peaks
        from headroom.projection.roofline import roofline_targets

        return plain(roofline_targets(a, speedup, TARGET_GROUPINGS, top or None, 0, "self", peaks))
    table = targets(a, speedup=speedup, by=TARGET_GROUPINGS, top=top)
    missing = module_ranges_missing(a) if set(TARGET_GROUPINGS) & set(MODULE_KINDS) else None
    return targets_dict(a, table, speedup, notes=[missing] if missing else [])


def _projection(
    a: Analysis, entries: Sequence[Speedup], entry_warnings: Sequence[str], problems: ProblemMap | None
) -> dict[str, Any]:
    from headroom.projection.project import project

    body = plain(project(a, entries, problems=problems, extra_warnings=list(entry_warnings)))
    est, steps = body.get("estimate") or {}, max(int(body.get("num_steps") or 1), 1)
    # The estimate per step (the figure's bars): its totals over the profiled steps, divided by them.
    body["estimate_per_step_us"] = {
        k: est[k] / steps for k in ("baseline_us", "projected_us", "low_us", "high_us") if est.get(k) is not None
    }
    return body


def _rank_view(rs: RankSet) -> dict[str, Any]:
    """A rank set's per-rank bars (compute, exposed communication and idle, per step) and its categories
    across ranks (the `classify DIR --json` rows)."""
    d = rs.to_dict()
    bars = []
    for r in d["per_rank"]:
        n = max(int(r["num_steps"]), 1)
        bars.append(
            {
                "rank": r["rank"],
                "step_us": r["step_us"],
                "compute_us_per_step": r["compute_busy_us"] / n,
                "comm_exposed_us_per_step": r["comm_exposed_us"] / n,
                "idle_us_per_step": r["idle_us"] / n,
                "wait_us_per_step": r["wait_us"] / n,
            }
        )
    return {
        "source": rs.source,
        "mode": d["mode"],
        "world_size": d["world_size"],
        "backend": d["backend"],
        "parallel": d["parallel"],
        "step_us": d["step_us"],
        "slowest_rank": d["slowest_rank"],
        "collectives": d["collectives"],
        "bars": bars,
        "categories": d["categories"],
        "warnings": d["warnings"],
    }


def page_numbers(
    analyses: Sequence[Analysis],
    rank_sets: Sequence[RankSet] = (),
    entries: Sequence[Speedup] = (),
    entry_warnings: Sequence[str] = (),
    target_speedup: float = DEFAULT_SPEEDUP,
    top: int = DEFAULT_TOP,
    problems: ProblemMap | None = None,
    roofline: bool = False,
    peaks: str | None = None,
) -> dict[str, Any]:
    """What the page shows beyond the summary (`page` in `report --html --json`): `target_speedup`, `top`,
    `categories`, `targets` (per trace, then per rank set; `roofline`: each trace's with the roofline
    columns, against `peaks` or the trace's GPU), `projections` (per trace, then per rank set; empty
    without speedup entries) and `ranks` (per rank set)."""
    from headroom.projection.speedups import parse_factor

    parse_factor(target_speedup, "--target-speedup")
    page: dict[str, Any] = {
        "target_speedup": target_speedup,
        "top": top,
        "categories": _categories(analyses),
        "targets": [_targets(a, target_speedup, top, roofline, peaks) for a in analyses],
        "projections": [],
        "ranks": [_rank_view(rs) for rs in rank_sets],
    }
    if rank_sets:
        from headroom.projection.sync_targets import sync_targets, sync_targets_dict

        page["targets"] += [
            sync_targets_dict(
                rs, sync_targets(rs, speedup=target_speedup, by=TARGET_GROUPINGS, top=top), target_speedup
            )
            for rs in rank_sets
        ]
    if entries:
        page["projections"] = [_projection(a, entries, entry_warnings, problems) for a in analyses]
        if rank_sets:
            from headroom.projection.sync_projection import project_ranks

            for rs in rank_sets:
                rp = project_ranks(rs, entries, problems=problems)
                rp.warnings = list(entry_warnings) + rp.warnings
                page["projections"].append(plain(rp))
    return page


REPORT_SCHEMA = "headroom.report/1"


def check_html_output(out: str | os.PathLike, inputs: Sequence[str | os.PathLike | None]) -> Path:
    """The page's path, checked before any trace is read: writable, and none of the inputs (an .html
    file is never read as a trace, so one beside the traces is allowed)."""
    from headroom.files import check_output_file, check_output_not_input
    from headroom.trace.load import is_trace_name

    check_output_not_input(out, inputs, reads=is_trace_name, option="--html")
    return check_output_file(out)


def html_report(
    analyses: Sequence[Analysis],
    rank_sets: Sequence[RankSet],
    out: str | os.PathLike,
    entries: Sequence[Speedup] = (),
    entry_warnings: Sequence[str] = (),
    failed: Sequence[str] = (),
    target_speedup: float = DEFAULT_SPEEDUP,
    top: int = DEFAULT_TOP,
    problems: ProblemMap | None = None,
    roofline: bool = False,
    peaks: str | None = None,
) -> dict[str, Any]:
    """Compute the page's numbers, write the page to `out` (atomically) and return its document: the
    `headroom report --json` document with `html` (the path written) and `page` (page_numbers)."""
    from headroom.report.html import write_page

    doc = {
        "schema": REPORT_SCHEMA,
        **report_body(analyses, rank_sets, failed),
        "html": str(out),
        "page": page_numbers(
            analyses, rank_sets, entries, entry_warnings, target_speedup, top, problems, roofline, peaks
        ),
    }
    write_page(Path(out), doc)
    return doc
