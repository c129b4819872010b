"""Suites: every candidate of every problem in a directory, builds first, one results document."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from headroom.errors import UserError
from headroom.verify import build as bld
from headroom.verify.candidate import verify_candidate
from headroom.verify.options import VerifyOptions
from headroom.verify.reference import prepare_reference
from headroom.verify.results import VerifyResult, suite_document, write_json


def natural_key(p: Path) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.stem))


def candidates_for(stem: str, candidates_dir: Path) -> list[Path]:
    """Candidates of one problem: ``DIR/<stem>.py`` and ``DIR/<stem>/*.py``."""
    found = []
    single = candidates_dir / f"{stem}.py"
    if single.is_file():
        found.append(single)
    sub = candidates_dir / stem
    if sub.is_dir():
        found.extend(sorted(p for p in sub.glob("*.py") if not p.name.startswith("_")))
    return found


def problems_in(suite_dir: Path) -> list[Path]:
    if not suite_dir.is_dir():
        raise UserError(f"{suite_dir}: suite directory not found")
    return sorted((p for p in suite_dir.glob("*.py") if not p.name.startswith("_")), key=natural_key)


def verify_pairs(
    pairs: list[tuple[Path, list[Path]]], options: VerifyOptions, progress: Callable[[str], None] | None = None
) -> list[VerifyResult]:
    """Build every candidate that compiles extensions (in parallel), then verify problem by problem."""
    say = progress or (lambda s: None)
    device = options.resolved_device()
    own_dir = options.build_dir is None
    build_dir = options.build_dir or bld.new_build_dir()
    opts = replace(options, build_dir=build_dir)
    results: list[VerifyResult] = []
    try:
        logs = opts.log_dir or build_dir
        built = bld.build_all(
            [(p, c) for p, cs in pairs for c in cs],
            device,
            build_dir,
            opts.build_timeout,
            logs,
            env=opts.env,
            progress=say,
        )
        for p, cands in pairs:
            try:
                ref = prepare_reference(p, opts, say)
            except UserError as e:
                results.extend(VerifyResult(p.stem, str(c), "error", reason=str(e)) for c in cands)
                continue
            try:
                for c in cands:
                    results.append(verify_candidate(p, c, opts, reference=ref, progress=say, built=built.get(str(c))))
            finally:
                ref.close()
    finally:
        if own_dir:
            shutil.rmtree(build_dir, ignore_errors=True)
    return results


def verify_suite(
    suite_dir: str | Path,
    candidates_dir: str | Path,
    options: VerifyOptions | None = None,
    out: str | Path | None = None,
    problems: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    run_pairs: Callable | None = None,
) -> dict:
    """Verify every candidate of every problem in ``suite_dir``; returns (and writes) the results document.
    ``run_pairs``: what verifies them (default `verify_pairs`, in this process; headroom.fleet.verify: over
    an engine's workers)."""
    options = options or VerifyOptions()
    suite, cdir = Path(suite_dir), Path(candidates_dir)
    if not cdir.is_dir():
        raise UserError(f"{cdir}: candidates directory not found")
    paths = problems_in(suite)
    if problems:
        unknown = set(problems) - {p.stem for p in paths}
        if unknown:
            raise UserError(f"{suite}: no problem named {', '.join(sorted(unknown))}")
        paths = [p for p in paths if p.stem in set(problems)]
    pairs = [(p, candidates_for(p.stem, cdir)) for p in paths]
    missing = [p.stem for p, cs in pairs if not cs]
    results = (run_pairs or verify_pairs)([(p, cs) for p, cs in pairs if cs], options, progress)
    device = next((r.device for r in results if r.device), options.device)
    doc = suite_document(results, device, missing_candidates=missing)
    if out is not None:
        write_json(doc, out)
    return doc
