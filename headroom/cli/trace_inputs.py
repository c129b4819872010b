"""Trace arguments on the command line: a trace file, a directory of traces analysed one by one,
or a directory of the ranks of one run, analysed together (docs/distributed.md).

`headroom.cli.common.Reader.inputs` reads them; this module decides what a directory's traces are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence, Union

from headroom.cli.output import warn
from headroom.trace.analysis import Analysis
from headroom.trace.rank_set import RankSet, rank_id, rank_order, rank_set, repeated_ranks

Input = Union[Analysis, RankSet]


def group_ranks(path: Path, analyses: Sequence[Analysis]) -> list[Input]:
    """A directory's analyses: one RankSet when they are the ranks of one run, else each on its own.

    The rank set's caveats (missing ranks, unpaired collectives) are warnings on stderr."""
    ranks = rank_order(analyses)
    if ranks is not None:
        rs = rank_set(analyses, ranks, source=str(path))
        for w in rs.warnings:
            warn(f"{rs.source}: {w}")
        return [rs]
    repeated = repeated_ranks(analyses)
    if repeated:
        rank, names = next(iter(sorted(repeated.items())))
        warn(f"{path}: rank {rank} has {len(names)} traces ({', '.join(names[:3])}): "
             f"analysed one by one, not as the ranks of one run")
    return list(analyses)


def looks_like_ranks(analyses: Sequence[Analysis]) -> bool:
    """Every trace says which rank it is (of a run of more than one): a directory of ranks, whether or
    not all of them could be read."""
    ids = [rank_id(a) for a in analyses]
    return all(i is not None and (i.world_size or 2) > 1 for i in ids)
