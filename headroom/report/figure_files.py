"""A figure's files: each format written atomically, and the numbers it draws as a JSON document a test can
recompute (tests/test_figures.py). Drawing is headroom/report/plot.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from headroom.errors import UserError
from headroom.files import write_atomic
from headroom.jsonio import write_json

if TYPE_CHECKING:  # annotations only: the formats are known without importing matplotlib
    from matplotlib.figure import Figure

FORMATS = ("png", "svg", "pdf")


def save(
    fig: Figure, stem: str | Path, formats: Sequence[str] = FORMATS, dpi: int = 200, numbers: dict | None = None
) -> list[Path]:
    """Write the figure as stem.png/.svg/.pdf (each atomically: a full disk leaves no half file),
    and with `numbers` stem.json, the numbers it draws; returns the paths."""
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise UserError(f"unknown format(s) {', '.join(bad)} (png, svg, pdf)")
    stem = Path(stem)
    out = []
    for f in formats:
        p = stem.with_suffix(f".{f}")
        # Fixed metadata, so the same numbers give the same file (a figure in git changes only with them).
        meta = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[f]

        def save(fh: Any, f: str = f, meta: dict[str, Any] = meta) -> None:
            fig.savefig(fh, format=f, dpi=dpi, bbox_inches="tight", metadata=meta)

        write_atomic(p, save)
        out.append(p)
    if numbers is not None:
        out.append(write_json(stem.with_suffix(".json"), numbers))
    return out


def addressable_numbers(fractions: pd.DataFrame, summary: pd.DataFrame, basis: str, sources: Sequence[str]) -> dict:
    """What the addressable figure draws, as a document a test can recompute and compare."""
    return {
        "schema": "headroom.figure.addressable/1",
        "basis": basis,
        "traces": list(sources),
        "bars": [
            {
                "workload": r.workload,
                "category": r.category,
                "addressable": bool(r.addressable),
                "fraction": round(float(r.fraction), 6),
            }
            for r in fractions.itertuples(index=False)
        ],
        "addressable": [
            {
                "workload": r.workload,
                "fraction": round(float(r.addressable_fraction), 6),
                "gpu_time_fraction": round(float(r.kernel_fraction), 6),
            }
            for r in summary.itertuples(index=False)
        ],
    }


def table_numbers(name: str, table: pd.DataFrame, sources: Sequence[str]) -> dict:
    rows = [
        {
            k: (round(float(v), 6) if isinstance(v, (float, np.floating)) else v.item() if hasattr(v, "item") else v)
            for k, v in row.items()
        }
        for row in table.to_dict("records")
    ]
    return {"schema": f"headroom.figure.{name}/1", "traces": list(sources), "rows": rows}
