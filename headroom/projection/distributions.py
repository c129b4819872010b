"""Speedup distributions: a whole benchmark's per-problem results."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headroom.errors import UserError
from headroom.projection.speedups import best_passes, load_speedup_file, parse_factor


@dataclass(frozen=True)
class Distribution:
    """Per-problem outcomes of a benchmark: the speedup of each passing problem, None for failures."""

    speedups: tuple[float | None, ...]
    source: str = ""

    @property
    def n(self) -> int:
        return len(self.speedups)

    @property
    def wins(self) -> list[float]:
        return [s for s in self.speedups if s is not None and s > 1.0]

    @property
    def win_rate(self) -> float:
        return len(self.wins) / self.n if self.n else 0.0

    @property
    def median_win(self) -> float:
        w = self.wins
        return float(np.median(w)) if w else 1.0

    def effective(self) -> np.ndarray:
        """What a user would deploy per problem: the new kernel if it wins, else PyTorch's (1.0)."""
        return np.array([max(s, 1.0) if s is not None else 1.0 for s in self.speedups], dtype=float)


def load_distribution(path: str | os.PathLike[str]) -> Distribution:
    """A distribution from verify output (failures count as no win), or any speedup file / plain number list."""
    path = Path(path)
    if path.suffix.lower() in (".txt", "") and path.exists():
        vals = [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        return Distribution(
            tuple(parse_factor(v, f"{path}: line {i}") for i, v in enumerate(vals, 1)), source=str(path)
        )
    if path.suffix.lower() == ".json" and path.exists():
        try:
            doc = json.loads(path.read_text())
        except ValueError as e:
            raise UserError(f"{path}: invalid JSON ({e})") from None
        if isinstance(doc, list) and doc and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in doc):
            return Distribution(
                tuple(parse_factor(v, f"{path}: item {i}") for i, v in enumerate(doc, 1)), source=str(path)
            )
    sf = load_speedup_file(path)
    if sf.kind == "verify":
        # One value per problem: its fastest passing candidate, None if none passed.
        passes = best_passes(sf.results, str(path))
        return Distribution(tuple([p.speedup for p in passes.best.values()] + [None] * len(passes.failed)), str(path))
    return Distribution(tuple(e.speedup for e in sf.entries), str(path))
