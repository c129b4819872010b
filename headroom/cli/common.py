"""What the trace-reading commands share: the options that choose rules, policy and the analysed
time, and reading many traces so that one bad file is named and the rest still reported."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List, Optional

import typer

from headroom.cli.output import EXIT_USAGE, error, progress, warn
from headroom.errors import UserError

def choices(name: str, *values: str) -> type[enum.Enum]:
    """An Enum of `values` for an option, so that --help and shell completion list them."""
    return enum.Enum(name, {v.replace("-", "_"): v for v in values}, type=str)


RulesOpt = typer.Option(None, "--rules", metavar="FILE",
                        help="TOML file of extra classification rules (tried first).")
PolicyOpt = typer.Option(None, "--policy", metavar="FILE",
                         help="TOML file overriding which categories are addressable.")
WholeOpt = typer.Option(False, "--whole-trace", metavar="",
                        help="Analyse the whole trace, not only the ProfilerStep ranges.")
WindowOpt = typer.Option(None, "--window", metavar="REGEX",
                         help="Steps are the CPU ranges whose name matches REGEX (e.g. execute_model), "
                              "for traces without ProfilerStep ranges.")
TracesArg = typer.Argument(..., metavar="TRACE...",
                           help="Trace files (.json/.json.gz) or directories of per-rank traces.")


@dataclass
class Reader:
    """Reads traces one at a time; a trace that cannot be read is named on stderr and skipped.

    `finish()` exits 2 when any trace failed, after the others were reported.
    """

    rules: Optional[Path] = None
    policy: Optional[Path] = None
    whole_trace: bool = False
    window: Optional[str] = None
    failed: List[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from headroom.trace.classify import load_classifier

        self._rules, self._policy = load_classifier(self.rules, self.policy)

    def files(self, paths: List[Path]) -> Iterator[Path]:
        from headroom.trace.load import find_trace_files

        for p in paths:
            try:
                yield from find_trace_files(p)
            except UserError as e:
                self._fail(str(p), e)

    def analyses(self, paths: List[Path]) -> Iterator:
        """Each trace's Analysis, one by one (a directory: each trace in it)."""
        yield from self._analyse(self.files(paths))

    def inputs(self, paths: List[Path]) -> Iterator:
        """Like `analyses`, but a directory holding the ranks of one run becomes one RankSet
        (headroom.trace.ranks), analysed together; every other trace is an Analysis."""
        from headroom.cli.ranks import group_ranks, looks_like_ranks

        for p in paths:
            if not Path(p).is_dir():
                yield from self.analyses([p])
                continue
            failed = len(self.failed)
            analyses = list(self.analyses([p]))
            if len(self.failed) > failed:
                if analyses and looks_like_ranks(analyses):
                    warn(f"{p}: {len(self.failed) - failed} trace(s) could not be read: the other "
                         f"{len(analyses)} analysed one by one, not as the ranks of one run")
                yield from analyses
                continue
            try:
                yield from group_ranks(p, analyses)
            except UserError as e:
                self._fail(str(p), e)

    def _analyse(self, files: Iterator[Path]) -> Iterator:
        from headroom.trace.analysis import analyze

        for f in files:
            try:
                with progress(f"reading {f.name}"):
                    a = analyze(f, rules=self._rules, policy=self._policy, whole_trace=self.whole_trace,
                                window=self.window)
            except UserError as e:
                self._fail(str(f), e)
                continue
            for note in a.notes:
                warn(f"{a.source}: {note}")
            yield a

    def _fail(self, path: str, e: UserError) -> None:
        self.failed.append(path)
        error(str(e))

    def finish(self) -> None:
        if self.failed:
            raise typer.Exit(code=EXIT_USAGE)


def read_all(paths: List[Path], rules: Optional[Path] = None, policy: Optional[Path] = None,
             whole_trace: bool = False, window: Optional[str] = None) -> list:
    """Every trace, or exit 2 naming the first that cannot be read (for commands that need them all)."""
    reader = Reader(rules, policy, whole_trace, window)
    out = list(reader.analyses(paths))
    reader.finish()
    return out
