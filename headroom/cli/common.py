"""What the trace-reading commands share: the options that choose rules, policy and the analysed
time, and reading many traces so that one bad file is named and the rest still reported.

The reading flags (--rules, --policy, --whole-trace, --window, --lenient, --no-cache, --graph-source) are the
fields of one `ReadOptions` and take its defaults: a command builds it once (`ReadOptions.from_flags`) and
hands it to its `Reader`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from headroom.cli.output import EXIT_USAGE, error, progress, warn
from headroom.errors import UserError
from headroom.trace.read_options import ReadOptions

_READ = ReadOptions()  # the reading flags' defaults

RulesOpt = typer.Option(
    _READ.rules, "--rules", metavar="FILE", help="TOML file of extra classification rules (tried first)."
)
PolicyOpt = typer.Option(
    _READ.policy, "--policy", metavar="FILE", help="TOML file overriding which categories are addressable."
)
WholeOpt = typer.Option(
    _READ.whole_trace, "--whole-trace", metavar="", help="Analyse the whole trace, not only the ProfilerStep ranges."
)
WindowOpt = typer.Option(
    _READ.window,
    "--window",
    metavar="REGEX",
    help="Steps are the CPU ranges whose name matches REGEX (e.g. execute_model), "
    "for traces without ProfilerStep ranges.",
)
LenientOpt = typer.Option(
    _READ.lenient,
    "--lenient",
    metavar="",
    help=(
        "Drop GPU activities and steps with impossible times (missing, negative, non-finite, outside the trace) "
        "with a counted warning, instead of refusing the trace."
    ),
)
NoCacheOpt = typer.Option(
    not _READ.use_cache,
    "--no-cache",
    metavar="",
    help='Neither read nor write the trace\'s columnar cache (docs/trace-core.md, "Cache").',
)
SpeedupOpt = typer.Option(
    None,
    "--speedup",
    "-s",
    metavar="SELECTOR=FACTOR",
    help=(
        "Repeatable: category:embedding=1.552, op:aten::layer_norm=2, 'kernel:^triton_=1.2', "
        "problem:23_Softmax=1.3, 'module:RMSNorm=1.8,launches=1' (launches=N: kernels each call launches "
        "after the change; docs/projection.md). Command-line entries win overlaps with files."
    ),
)
SpeedupsOpt = typer.Option(
    None,
    "--speedups",
    "-f",
    metavar="FILE",
    help=("Speedup file (.toml/.json/.csv) or `headroom verify` JSON; repeatable."),
)
ProblemsOpt = typer.Option(
    None, "--problems", metavar="FILE", help="TOML file adding/replacing problem -> selector mappings."
)
GraphSourceOpt = typer.Option(
    _READ.graph_source,
    "--graph-source",
    metavar="TRACE",
    help=(
        "A trace of the same step run eagerly (or holding the CUDA graph's capture): kernels replayed from a "
        "graph take their op, module and phase from it when the analysed trace does not hold the capture "
        "(docs/graphs.md)."
    ),
)
TracesArg = typer.Argument(
    ..., metavar="TRACE...", help="Trace files (.json/.json.gz) or directories of per-rank traces."
)


@dataclass
class Reader:
    """Reads traces one at a time; a trace that cannot be read is named on stderr and skipped.

    The files of one path (a directory of ranks) are loaded by `iter_traces`, which decodes the next
    file in its worker process while this one is analysed. `finish()` exits 2 when any trace failed,
    after the others were reported. `read`: how each trace is read (the command's reading flags).
    """

    read: ReadOptions = field(default_factory=ReadOptions)
    failed: list[str] = field(default_factory=list)
    # --engine: where each trace is read (headroom.cli.engine); `product`: the command's per-trace work (a
    # module-level function of one Analysis), done by each trace's task with --engine ray (`per_trace`).
    engine: str = "local"
    address: str | None = None
    product: Callable[[Any], Any] | None = None
    results: dict = field(default_factory=dict, repr=False)
    # `inputs` gives each trace's Summary (headroom/report/summary.py: what classify and report print) instead
    # of its Analysis, read from the trace's cache entry when one was kept there.
    summaries: bool = False
    _summaries: dict = field(default_factory=dict, repr=False)  # id(Analysis) -> (it, its Summary) made this run

    def __post_init__(self) -> None:
        from headroom.trace.classify import load_classifier

        self._rules, self._policy = load_classifier(self.read.rules, self.read.policy)
        self._graph_source: Any = None
        if self.read.graph_source is not None and (self.engine != "local" or self.address is not None):
            raise UserError("--graph-source is read in this process: leave out --engine/--address")

    def source_trace(self) -> Any:
        """The --graph-source trace, loaded once (None without one)."""
        source = self.read.graph_source
        if source is not None and self._graph_source is None:
            from headroom.trace.load import load_trace

            with progress(f"reading {Path(source).name}"):
                self._graph_source = load_trace(source, lenient=self.read.lenient, use_cache=self.read.use_cache)
        return self._graph_source

    def files(self, paths: list[Path]) -> Iterator[list[Path]]:
        """The trace files of each path, path by path (a bad path is named and skipped)."""
        from headroom.cli import replay
        from headroom.trace.load import find_trace_files

        for p in paths:
            if Path(p).is_dir():
                replay.refuse()  # its list of files may change
            try:
                found = find_trace_files(p)
                for f in found:
                    replay.reads(f)
                yield found
            except UserError as e:
                self._fail(str(p), e)

    def analyses(self, paths: list[Path]) -> Iterator:
        """Each trace's Analysis, one by one (a directory: each trace in it)."""
        for files in self.files(paths):
            yield from self._analyse(files)

    def inputs(self, paths: list[Path]) -> Iterator:
        """Like `analyses`, but a directory holding the ranks of one run becomes one RankSet
        (headroom.trace.rank_set), analysed together; every other trace is an Analysis (with `summaries`,
        its Summary)."""
        for item in self._inputs(paths):
            yield self._summary_of(item) if self.summaries else item

    def _inputs(self, paths: list[Path]) -> Iterator:
        if self.engine != "local" or self.address is not None:
            from headroom.cli.engine import fleet_inputs

            yield from fleet_inputs(self, paths)
            return
        for p in paths:
            if not Path(p).is_dir():
                kept = self._kept_summary(p) if self.summaries else None
                yield from [kept] if kept is not None else self.analyses([p])
                continue
            from headroom.cli.trace_inputs import group_ranks, looks_like_ranks  # here: a single trace never needs them

            failed = len(self.failed)
            analyses = list(self.analyses([p]))
            if len(self.failed) > failed:
                if analyses and looks_like_ranks(analyses):
                    warn(
                        f"{p}: {len(self.failed) - failed} trace(s) could not be read: the other "
                        f"{len(analyses)} analysed one by one, not as the ranks of one run"
                    )
                yield from analyses
                continue
            try:
                yield from group_ranks(p, analyses)
            except UserError as e:
                self._fail(str(p), e)

    def _kept_summary(self, path: Path) -> Any:
        """The summary kept for this trace read this way (its notes warned, as a read warns them), or None."""
        from headroom.cli import replay
        from headroom.report import summary

        kept = summary.fetch(path, self.read, self._rules, self._policy)
        if kept is not None:
            replay.reads(Path(path))
            for note in kept.notes:
                warn(f"{kept.source}: {note}")
        return kept

    def _summary_of(self, item: Any) -> Any:
        """An Analysis' Summary (kept in its cache entry when it has one); a Summary or a RankSet as it is."""
        from headroom.report.summary import Summary

        if isinstance(item, Summary):
            return item
        from headroom.trace.analysis import Analysis  # (imported by whatever made the item)

        if not isinstance(item, Analysis):
            return item
        made = self._summaries.pop(id(item), None)
        if made is not None:
            return made[1]
        return self.per_trace(item) if self.product is not None else self._keep(item)

    def _keep(self, a: Any) -> Any:
        """`a`'s Summary, kept in its trace's cache entry for a later classify or report."""
        from headroom.report import summary

        s = summary.of(a)
        summary.store(s, a, self.read, self._rules, self._policy)  # (not with --no-cache or --graph-source)
        return s

    def per_trace(self, a: Any) -> Any:
        """`product(a)`: computed by the trace's task where it ran, else now."""
        done = self.results.get(id(a))
        if done is not None and done.has_product:
            return done.get()
        if self.product is None:
            raise TypeError("Reader.per_trace needs a product (the command's per-trace work)")
        return self.product(a)

    def _analyse(self, files: list[Path]) -> Iterator:
        from headroom.trace.analysis import analyze
        from headroom.trace.load import iter_traces

        options = self.read
        while files:
            traces = iter_traces(files, lenient=options.lenient, use_cache=options.use_cache)
            done = 0  # files[done] is the one being read (iter_traces yields them in order)
            try:
                while done < len(files):
                    with progress(f"reading {files[done].name}"):
                        trace = next(traces, None)
                        if trace is None:  # pragma: no cover - iter_traces yields one Trace per file
                            return
                        a = analyze(
                            trace,
                            rules=self._rules,
                            policy=self._policy,
                            whole_trace=options.whole_trace,
                            window=options.window,
                            graph_source=self.source_trace(),
                        )
                    _reads_capture(files[done], trace.metadata)
                    if trace.cache_key is not None:  # (summary.py keeps none without a cache entry)
                        made = self._keep_missing(a)
                        if made is not None and self.summaries:
                            self._summaries[id(a)] = (a, made)  # (`a` held: its id is not reused meanwhile)
                    done += 1
                    for note in a.notes + a.warnings:
                        warn(f"{a.source}: {note}")
                    yield a
            except UserError as e:
                self._fail(str(files[done]), e)
                done += 1
            finally:
                traces.close()
            files = files[done:]

    def _keep_missing(self, a: Any) -> Any:
        """`a`'s Summary when its trace's entry lacks it (made and kept now, so that a later classify or report
        prints it without reading the trace), else None."""
        from headroom.report import summary

        if summary.kept(a.source, self.read, self._rules, self._policy):
            return None
        return self._keep(a)

    def _fail(self, path: str, e: UserError) -> None:
        from headroom.trace.document import named, source_name

        self.failed.append(source_name(path))
        error(named(str(e)))

    def finish(self) -> None:
        if self.failed:
            raise typer.Exit(code=EXIT_USAGE)


def _reads_capture(path: Path, metadata: dict) -> None:
    """The capture trace a trace's manifest names is read too (analysis.analyze)."""
    from headroom.cli import replay
    from headroom.trace.graphs import capture_trace_of

    capture = capture_trace_of(path, metadata)
    if capture is not None:
        replay.reads(capture)


def read_all(paths: list[Path], read: ReadOptions = _READ) -> list:
    """Every trace, or exit 2 naming the first that cannot be read (for commands that need them all)."""
    reader = Reader(read)
    out = list(reader.analyses(paths))
    reader.finish()
    return out
