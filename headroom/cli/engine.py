"""`--engine local|ray` and `--address` of the trace-reading commands and `verify --suite`, and the reading of
traces through an engine other than this process (headroom.fleet): one task per trace file, then the
same reduction as `headroom.cli.common.Reader` (errors named in order, a directory of ranks grouped)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import typer

from headroom.cli.output import warn
from headroom.errors import UserError

EngineOpt = typer.Option(
    "local",
    "--engine",
    metavar="ENGINE",
    help=(
        "local: in this process (default); ray: one task per trace (per candidate for verify) on a Ray cluster "
        "(pip install 'kernel-headroom[fleet]'; docs/fleet.md)."
    ),
)
AddressOpt = typer.Option(
    None,
    "--address",
    metavar="ADDR",
    help=(
        "With --engine ray: an existing cluster (e.g. auto, HOST:6379, ray://HOST:10001); default: start a local one."
    ),
)


ResumeOpt = typer.Option(
    False,
    "--resume",
    help=(
        "With --engine ray and --out: take the candidates already in the --out stream (OUT.jsonl) from it, "
        "run the others."
    ),
)


def fleet_inputs(reader, paths: list[Path]) -> Iterator:
    """What `Reader.inputs` yields, each trace read by a task of `reader.engine`."""
    from headroom.fleet import get_engine
    from headroom.fleet.traces import TraceTask, run_task, task_memory
    from headroom.trace.load import find_trace_files

    engine = get_engine(reader.engine, reader.address)
    options, cwd = reader.read, os.getcwd()
    found: list = []  # per path: its files, or the UserError that named it
    for p in paths:
        try:
            found.append(find_trace_files(p))
        except UserError as e:
            found.append(e)
    tasks = [
        TraceTask(str(f), options, reader.product, cwd=cwd) for files in found if isinstance(files, list) for f in files
    ]
    results = engine.map(run_task, tasks, memory=[task_memory(t.path) for t in tasks])
    for p, files in zip(paths, found):
        if isinstance(files, UserError):
            reader._fail(str(p), files)
            continue
        mine = [next(results) for _ in files]
        analyses = []
        for r in mine:
            if r.error is not None:
                reader._fail(r.path, r.error)
                continue
            for note in r.analysis.notes + r.analysis.warnings:
                warn(f"{r.analysis.source}: {note}")
            reader.results[id(r.analysis)] = r
            analyses.append(r.analysis)
        if not Path(p).is_dir():
            yield from analyses
            continue
        from headroom.cli.trace_inputs import group_ranks, looks_like_ranks

        if len(analyses) < len(files):
            if analyses and looks_like_ranks(analyses):
                warn(
                    f"{p}: {len(files) - len(analyses)} trace(s) could not be read: the other "
                    f"{len(analyses)} analysed one by one, not as the ranks of one run"
                )
            yield from _with_products(reader, engine, analyses, tasks)
            continue
        try:
            grouped = group_ranks(p, analyses)
        except UserError as e:
            reader._fail(str(p), e)
            continue
        yield from _with_products(reader, engine, grouped, tasks)


def _with_products(reader, engine, inputs: list, tasks: list) -> list:
    """Traces that said they were ranks but are analysed one by one: their products, computed now."""
    from headroom.fleet.traces import run_task, task_memory

    missing = [
        a
        for a in inputs
        if id(a) in reader.results and not reader.results[id(a)].has_product and reader.product is not None
    ]
    if missing:
        by_path = {t.path: t for t in tasks}
        again = [
            dataclasses.replace(by_path[reader.results[id(a)].path], product=reader.product, skip_ranks=False)
            for a in missing
        ]
        for a, r in zip(missing, engine.map(run_task, again, memory=[task_memory(t.path) for t in again])):
            reader.results[id(a)] = r if r.error is None else reader.results[id(a)]
    return inputs


def suite_runner(engine: str, address: str | None, out: Path | None, resume: bool = False):
    """`verify --suite` / `bench run`: None (in this process) or the candidates over the engine's workers,
    each result appended to the stream beside `out` (headroom.fleet.verify.stream_path) as it arrives."""
    if resume and (engine == "local" and address is None or out is None):
        raise UserError("--resume: only with --engine ray and --out (it reads the stream OUT.jsonl)")
    if engine == "local" and address is None:
        return None
    from headroom.fleet import get_engine
    from headroom.fleet.verify import pool_runner

    return pool_runner(get_engine(engine, address), stream_to=out, resume=resume)
