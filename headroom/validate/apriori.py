"""The one projection path: the a-priori estimate, as a user gets it before integrating.

``headroom extract`` writes the module as a problem (its entry ``ENTRY.toml``), ``headroom verify`` measures
the candidate on it (``verify.json``: speedup, launches, CPU time per call, host synchronisations), and
``headroom project BASE --problems ENTRY.toml --speedups verify.json`` projects it onto the base trace.
``apriori_projection`` is that projection; ``headroom validate`` reports it as its estimate (given the two
files: ``--speedups``/``--problems``, or ``verify.json`` and one ``*.toml`` found in the run directory or its
``loop/``), with the calibrated interval (``headroom.projection.calibration``), and the projections from
the variant trace as diagnostics. ``report.apriori`` computes its table with the same function.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from headroom.projection.problems import load_problems
from headroom.projection.project import project
from headroom.projection.speedups import load_speedup_file

VERIFY_FILE = "verify.json"


def apriori_projection(base: Any, verify: str | Path, problems: str | Path | None) -> tuple[Any, Any]:
    """(the speedup file, the projection result) of verify's result on the analysed base trace."""
    speedups = load_speedup_file(verify)
    res = project(base, speedups.entries, problems=load_problems(problems) if problems else None)
    return speedups, res


def find_inputs(directory: Path) -> tuple[Path | None, Path | None]:
    """verify.json (or a speedups.toml/.csv given instead) and the problem's entry saved with a run: in the
    directory, else under ``loop/`` (the layout lab/gpu/gpu_validate.py writes: ``loop/verify.json``,
    ``loop/problem/*.toml``)."""
    for where in (directory, directory / "loop"):
        found = [p for p in (where / VERIFY_FILE, where / "speedups.toml", where / "speedups.csv") if p.is_file()]
        if found:
            v = found[0]
            entries = [p for p in sorted(where.glob("*.toml")) if p != v] or sorted((where / "problem").glob("*.toml"))
            return v, entries[0] if len(entries) == 1 else None
    return None, None
