"""A suite's candidates spread over an engine's workers (`Engine.pool`: one Ray actor per GPU, one per CPU
on a machine without one). Each worker runs the harness exactly as `headroom verify` does in one process
(`headroom.verify.suite.verify_pairs` on one candidate: its build, its reference, its sealed child
processes); the results come back one by one, each written into the results file as it arrives, and the
document lists them in the suite's order. A worker lost mid-candidate has that candidate run again on
another worker; a candidate is counted once (`tests/test_fleet.py` kills a worker mid-run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from headroom.verify.options import VerifyOptions
from headroom.verify.results import VerifyResult, suite_document, write_json


def verify_one(unit: tuple[str, str, VerifyOptions]) -> VerifyResult:
    """One candidate of one problem, verified where the worker runs."""
    from headroom.verify.suite import verify_pairs

    problem, candidate, options = unit
    return verify_pairs([(Path(problem), [Path(candidate)])], options)[0]


def pool_runner(engine, stream_to: Optional[Path] = None,
                on_dispatch: Optional[Callable[[object, int], None]] = None) -> Callable:
    """A `run_pairs` for `headroom.verify.suite.verify_suite`: the candidates over `engine`'s workers."""

    def run_pairs(pairs: list, options: VerifyOptions, progress: Optional[Callable[[str], None]] = None
                  ) -> list[VerifyResult]:
        say = progress or (lambda s: None)
        units = [(str(p), str(c), options) for p, cs in pairs for c in cs]
        results: dict[int, VerifyResult] = {}
        for i, r in engine.pool(verify_one, units, on_dispatch=on_dispatch):
            results.setdefault(i, r)
            say(f"{r.problem} <- {Path(r.candidate).name}: {r.verdict} ({len(results)} of {len(units)})")
            if stream_to is not None:
                done = [results[k] for k in sorted(results)]
                write_json(suite_document(done, next((x.device for x in done if x.device), options.device),
                                          missing_candidates=[]), stream_to)
        return [results[i] for i in range(len(units))]

    return run_pairs
