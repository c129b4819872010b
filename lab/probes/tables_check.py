"""Every real trace gives the same tables: save the loader's tables and the analysis of each one, compare later.

    python lab/probes/tables_check.py --save before/          # record (pickles, one per trace)
    python lab/probes/tables_check.py --compare before/       # exit 1 on any difference

The real traces: traces/**/*.json.gz (committed) and the HTA test traces in the
shared folder ($HEADROOM_SHARED, ../shared or /work/shared). Tables are compared
with pandas' assert_frame_equal (values, dtypes, categories, row order); the
analysis by its numbers and its attributed, classified events.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.shapes import shared_dir  # noqa: E402
from headroom.errors import UserError  # noqa: E402
from headroom.trace.analysis import analyze  # noqa: E402
from headroom.trace.load import load_trace  # noqa: E402

TABLES = ("gpu", "cpu", "launches", "gpu_annotations", "syncs")


def real_traces() -> list[Path]:
    return sorted(REPO.glob("traces/**/*.json.gz")) + sorted((shared_dir() / "hta-traces").glob("*.json.gz"))


def snapshot(path: Path) -> dict:
    trace = load_trace(path, use_cache=False)
    row = {t: getattr(trace, t) for t in TABLES}
    row["steps"] = trace.steps
    try:
        a = analyze(trace, whole_trace=len(trace.steps) == 0)
        row["analysis"] = {
            "total_us": a.total_us,
            "busy_us": a.busy_us,
            "wall_us": a.wall_us,
            "addressable_us": a.addressable_us,
            "categories": a.categories,
            "events": a.events,
        }
    except UserError as e:
        row["analysis"] = f"error: {e}"
    return row


def differences(before, after, where: str = "") -> list[str]:
    if isinstance(before, pd.DataFrame) or isinstance(after, pd.DataFrame):
        try:
            pd.testing.assert_frame_equal(before, after, check_categorical=True)
            return []
        except (AssertionError, TypeError) as e:
            return [f"{where}: {' '.join(str(e).split())[:300]}"]
    if isinstance(before, dict) and isinstance(after, dict):
        return [
            d
            for k in sorted(set(before) | set(after))
            for d in differences(before.get(k), after.get(k), f"{where}.{k}" if where else k)
        ]
    return [] if before == after else [f"{where}: {before!r} -> {after!r}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", type=Path, help="directory to write the snapshots to")
    ap.add_argument("--compare", type=Path, help="directory of snapshots to compare with")
    args = ap.parse_args()
    bad = 0
    traces = real_traces()
    for p in traces:
        name = (str(p.relative_to(REPO)) if p.is_relative_to(REPO) else f"hta-traces/{p.name}").replace("/", "__")
        row = snapshot(p)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"{name}.pkl").write_bytes(pickle.dumps(row))
        if args.compare:
            diffs = differences(pickle.loads((args.compare / f"{name}.pkl").read_bytes()), row)
            bad += bool(diffs)
            print(f"{'DIFFERENT' if diffs else 'identical'} {name}")
            for d in diffs:
                print(f"    {d}")
    if args.compare:
        print(f"{len(traces) - bad} identical, {bad} different")
        sys.exit(1 if bad else 0)
    print(f"{len(traces)} traces saved")


if __name__ == "__main__":
    main()
