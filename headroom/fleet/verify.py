"""A suite's candidates spread over an engine's workers (`Engine.pool`: one Ray actor per GPU, one per CPU
on a machine without one). Each worker runs the harness exactly as `headroom verify` does in one process
(`headroom.verify.suite.verify_pairs` on one candidate: its build, its reference, its sealed child
processes); the results come back one by one, each appended as one JSON line to the stream beside `--out`
(`stream_path`) as it arrives, and the document, in the suite's order, is written once at the end by
`verify_suite`. A worker lost mid-candidate has that candidate run again on another worker; a candidate is
counted and streamed once, keyed by problem and candidate (`tests/test_fleet.py` kills a worker mid-run).
A stream left by a driver that stopped is read back with `resume=True`: its candidates are not run again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from headroom import jsonio
from headroom.errors import UserError
from headroom.verify.compare import Check
from headroom.verify.options import VerifyOptions
from headroom.verify.results import VerifyResult

Key = tuple[str, str]  # (problem name, candidate path), as a VerifyResult names them


def verify_one(unit: tuple[str, str, VerifyOptions]) -> VerifyResult:
    """One candidate of one problem, verified where the worker runs."""
    from headroom.verify.suite import verify_pairs

    problem, candidate, options = unit
    return verify_pairs([(Path(problem), [Path(candidate)])], options)[0]


def stream_path(out: Path) -> Path:
    """The JSON Lines stream of `out`: results.json -> results.jsonl, any other name + .jsonl."""
    out = Path(out)
    return out.with_suffix(".jsonl") if out.suffix == ".json" else out.with_name(out.name + ".jsonl")


def result_from_dict(d: dict) -> VerifyResult:
    """A streamed line back as the result it was written from (`to_dict` of the result is the same dict)."""
    fields = set(VerifyResult.__dataclass_fields__)
    kw = {k: v for k, v in d.items() if k in fields}
    kw["checks"] = [Check(c["name"], c["passed"], c["detail"]) for c in d.get("checks", [])]
    kw["flags"] = [Check(f["name"], False, f["detail"]) for f in d.get("flags", [])]
    return VerifyResult(**kw)


def read_stream(path: Path) -> dict[Key, VerifyResult]:
    """The results of a stream, first line per candidate kept; a torn last line (a driver killed mid-write)
    is left out."""
    done: dict[Key, VerifyResult] = {}
    if not Path(path).is_file():
        return done
    lines = Path(path).read_bytes().split(b"\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = result_from_dict(json.loads(line))
        except (ValueError, KeyError, TypeError) as e:
            if n == len(lines):  # the line a stopped writer did not finish
                break
            raise UserError(f"{path}:{n}: not a streamed verify result ({e})") from None
        done.setdefault((r.problem, r.candidate), r)
    return done


class ResultStream:
    """Append-only: one line per candidate, flushed and fsynced before the next result is taken."""

    def __init__(self, path: Path, resume: bool = False) -> None:
        self.path = Path(path)
        self.done = read_stream(self.path) if resume else {}
        if resume and self.path.is_file():
            # Cut a torn last line so that the next one starts on its own line.
            text = self.path.read_bytes()
            keep = text[: text.rfind(b"\n") + 1]
            if keep != text:
                self.path.write_bytes(keep)
        self._f = open(self.path, "ab" if resume else "wb")

    def write(self, r: VerifyResult) -> None:
        key = (r.problem, r.candidate)
        if key in self.done:
            return
        self.done[key] = r
        self._f.write((jsonio.dumps(r) + "\n").encode())
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def pool_runner(
    engine,
    stream_to: Path | None = None,
    on_dispatch: Callable[[object, int], None] | None = None,
    resume: bool = False,
) -> Callable:
    """A `run_pairs` for `headroom.verify.suite.verify_suite`: the candidates over `engine`'s workers, each
    result appended to `stream_path(stream_to)` as it finishes; `resume`: that stream's candidates are
    taken from it, not run."""

    def run_pairs(
        pairs: list, options: VerifyOptions, progress: Callable[[str], None] | None = None
    ) -> list[VerifyResult]:
        say = progress or (lambda s: None)
        units = [(str(p), str(c), options) for p, cs in pairs for c in cs]
        keys = [(Path(p).stem, c) for p, c, _ in units]
        stream = ResultStream(stream_path(stream_to), resume) if stream_to is not None else None
        results: dict[int, VerifyResult] = {}
        if stream is not None:
            results.update({i: stream.done[k] for i, k in enumerate(keys) if k in stream.done})
            if results:
                say(f"{len(results)} of {len(units)} candidates from {stream.path}")
        todo = [i for i in range(len(units)) if i not in results]
        try:
            for j, r in engine.pool(verify_one, [units[i] for i in todo], on_dispatch=on_dispatch):
                i = todo[j]
                if i in results:  # pragma: no cover - the engine answers each index once
                    continue
                results[i] = r
                if stream is not None:
                    stream.write(r)
                say(f"{r.problem} <- {Path(r.candidate).name}: {r.verdict} ({len(results)} of {len(units)})")
        finally:
            if stream is not None:
                stream.close()
        return [results[i] for i in range(len(units))]

    return run_pairs
