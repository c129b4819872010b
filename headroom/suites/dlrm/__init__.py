"""DLRM-Bench: 12 recommender kernel problems in KernelBench format.

Each problem is a plain KernelBench file in ``problems/`` (``Model``,
``get_inputs()``, ``get_init_inputs()``), real-size shapes for an H200 by
default and a small CPU instance when ``HEADROOM_BENCH_SCALE=cpu`` is set
before the file is imported (the harness sets it in every process it
starts). ``candidates/`` holds one honest re-implementation per problem. What
each problem is and stands for lives in the catalogue
(``headroom/suites/dlrm_bench.toml``).

    headroom bench list
    headroom bench run [NAME ...] [--candidates DIR] [--scale cpu|full] [--out results.json]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from headroom.errors import UserError
from headroom.jsonio import plain
from headroom.suites.catalogue import SuiteProblem, load

HERE = Path(__file__).resolve().parent
PROBLEMS_DIR = HERE / "problems"
CANDIDATES_DIR = HERE / "candidates"
SCALE_ENV = "HEADROOM_BENCH_SCALE"
SCALES = ("full", "cpu")
PROBLEMS: tuple[SuiteProblem, ...] = load("dlrm_bench")
NAMES = tuple(p.name for p in PROBLEMS)


def path(p: SuiteProblem) -> Path:
    return PROBLEMS_DIR / f"{p.name}.py"


@dataclass(frozen=True)
class Listed:
    """A problem as `headroom bench list --json` shows it: the catalogue's words and where its file is."""

    name: str
    summary: str
    shapes: str
    stands_for: str
    select: tuple[str, ...]
    path: Path


def listed(p: SuiteProblem) -> Listed:
    return Listed(p.name, p.summary, p.shapes, p.stands_for, p.select, path(p))


def get(name: str) -> SuiteProblem:
    """A problem by exact name, or by its number prefix (``5`` / ``05``)."""
    for p in PROBLEMS:
        if name == p.name or name.lower() == p.name.lower():
            return p
    digits = name.lstrip("0")
    for p in PROBLEMS:
        if digits and p.name.split("_", 1)[0].lstrip("0") == digits:
            return p
    raise UserError(f"DLRM-Bench has no problem {name!r} (see `headroom bench list`)")


def default_scale(device: str) -> str:
    return "cpu" if device == "cpu" else "full"


def run(
    names: list[str] | None = None,
    candidates_dir: str | Path | None = None,
    options=None,
    scale: str | None = None,
    out: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    run_pairs: Callable | None = None,
) -> dict:
    """Verify candidates (default: the shipped honest ones) against DLRM-Bench; returns the suite document
    (`run_pairs`: as `headroom.verify.suite.verify_suite`'s)."""
    from headroom.verify import VerifyOptions, verify_suite, write_json

    selected = [get(n).name for n in names] if names else list(NAMES)
    cdir = Path(candidates_dir) if candidates_dir is not None else CANDIDATES_DIR
    # A wrong --candidates is bad input (exit 2) before any work, not a table of "no candidates" and exit 0.
    if not cdir.is_dir():
        raise UserError(f"--candidates {cdir}: {'no such directory' if not cdir.exists() else 'not a directory'}")
    if not any((cdir / f"{n}.py").is_file() or any((cdir / n).glob("*.py")) for n in selected):
        raise UserError(
            f"--candidates {cdir}: no candidate for any of the {len(selected)} problem(s) "
            f"(expected <problem>.py or <problem>/*.py, e.g. {selected[0]}.py)"
        )
    options = options or VerifyOptions()
    device = options.resolved_device()
    scale = scale or default_scale(device)
    if scale not in SCALES:
        raise UserError(f"--scale {scale}: expected one of {', '.join(SCALES)}")
    options.env = {**options.env, SCALE_ENV: scale}
    doc = verify_suite(PROBLEMS_DIR, cdir, options, out=None, problems=selected, progress=progress, run_pairs=run_pairs)
    doc["suite"] = "DLRM-Bench"
    doc["scale"] = scale
    from headroom.suites.scoring import score

    doc["aggregates"] = plain(score(doc))
    if out is not None:
        write_json(doc, out)
    return doc
