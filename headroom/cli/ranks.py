"""Trace arguments on the command line: a trace file, a directory of traces analysed one by one,
or a directory of the ranks of one run, analysed together (docs/distributed.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence, Union

from headroom.trace.analysis import Analysis, analyze
from headroom.trace.classify import load_policy, load_rules
from headroom.trace.load import find_trace_files
from headroom.trace.ranks import RankSet, rank_order, rank_set, repeated_ranks

Input = Union[Analysis, RankSet]


def analysed_inputs(paths: Sequence[Path], rules=None, policy=None, whole_trace: bool = False) -> list[Input]:
    """Each path's analyses; a directory whose traces are the ranks of one run becomes one RankSet."""
    r, p = load_rules(rules), load_policy(policy)
    out: list[Input] = []
    for path in paths:
        analyses = [analyze(f, rules=r, policy=p, whole_trace=whole_trace) for f in find_trace_files(path)]
        if Path(path).is_dir():
            ranks = rank_order(analyses)
            if ranks is not None:
                out.append(rank_set(analyses, ranks, source=str(path)))
                continue
            repeated = repeated_ranks(analyses)
            if repeated:
                rank, names = next(iter(sorted(repeated.items())))
                print(f"headroom: note: {path}: rank {rank} has {len(names)} traces ({', '.join(names[:3])}): "
                      f"analysed one by one, not as the ranks of one run", file=sys.stderr)
        out.extend(analyses)
    return out
