"""Trace arguments on the command line: a trace file, a directory of traces analysed one by one,
or a directory of the ranks of one run, analysed together (docs/distributed.md).

`headroom.cli.common.Reader.inputs` reads them; headroom.trace.rank_set.group_ranks decides what a
directory's traces are (the API's functions read a directory the same way).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from headroom.cli.output import warn
from headroom.trace import rank_set
from headroom.trace.analysis import Analysis
from headroom.trace.rank_set import RankSet, rank_id

Input = Analysis | RankSet


def group_ranks(path: Path, analyses: Sequence[Analysis]) -> list[Input]:
    """A directory's analyses: one RankSet when they are the ranks of one run, else each on its own.

    The caveats (missing ranks, unpaired collectives, a rank claimed twice) are warnings on stderr."""
    inputs, notes = rank_set.group_ranks(analyses, source=str(path))
    for w in notes:
        warn(f"{path}: {w}")
    return inputs


def looks_like_ranks(analyses: Sequence[Analysis]) -> bool:
    """Every trace says which rank it is (of a run of more than one): a directory of ranks, whether or
    not all of them could be read."""
    ids = [rank_id(a) for a in analyses]
    return all(i is not None and (i.world_size or 2) > 1 for i in ids)
