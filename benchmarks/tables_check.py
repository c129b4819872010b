"""Every real trace gives the same tables: digest the loader's tables and the analysis of each one.

    python benchmarks/tables_check.py --out before.json            # record
    python benchmarks/tables_check.py --compare before.json        # exit 1 on any difference

The real traces: traces/**/*.json.gz (committed) and the HTA test traces in the
shared folder ($HEADROOM_SHARED, ../shared or /work/shared). A table's digest
hashes its columns' names, dtypes and values in row order, so any changed
row, value or column shows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.shapes import shared_dir  # noqa: E402
from headroom.errors import UserError  # noqa: E402
from headroom.trace.analysis import analyze  # noqa: E402
from headroom.trace.load import load_trace  # noqa: E402

TABLES = ("gpu", "cpu", "launches", "gpu_annotations")


def real_traces() -> list[Path]:
    return sorted(REPO.glob("traces/**/*.json.gz")) + sorted((shared_dir() / "hta-traces").glob("*.json.gz"))


def digest(df: pd.DataFrame) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([[c, str(t)] for c, t in df.dtypes.items()]).encode())
    if len(df):
        h.update(pd.util.hash_pandas_object(df.astype({c: object for c in df.columns
                                                      if df[c].dtype == object}), index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


def check(path: Path) -> dict:
    trace = load_trace(path)
    row = {t: {"rows": len(getattr(trace, t)), "digest": digest(getattr(trace, t))} for t in TABLES}
    row["steps"] = digest(trace.steps)
    try:
        a = analyze(trace, whole_trace=len(trace.steps) == 0)
        row["analysis"] = {"total_us": round(a.total_us, 3), "busy_us": round(a.busy_us, 3),
                           "wall_us": round(a.wall_us, 3), "addressable_us": round(a.addressable_us, 3),
                           "events": len(a.events), "events_digest": digest(a.events.drop(columns=["wall_us"], errors="ignore")),
                           "categories": {r.name: round(float(r.us), 3) for r in a.categories.itertuples()}}
    except UserError as e:
        row["analysis"] = f"error: {e}"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", type=Path)
    args = ap.parse_args()
    rows = {}
    for p in real_traces():
        name = str(p.relative_to(REPO)) if p.is_relative_to(REPO) else f"hta-traces/{p.name}"
        rows[name] = check(p)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1, sort_keys=True))
    print(f"{len(rows)} traces")
    if args.compare:
        before = json.loads(args.compare.read_text())
        bad = 0
        for name in sorted(set(before) | set(rows)):
            if before.get(name) != rows.get(name):
                bad += 1
                b, a = before.get(name) or {}, rows.get(name) or {}
                keys = sorted(k for k in set(b) | set(a) if b.get(k) != a.get(k))
                print(f"DIFFERENT {name}: {keys}")
                for k in keys:
                    print(f"   before {k}: {b.get(k)}\n   after  {k}: {a.get(k)}")
        print(f"{len(rows) - bad} identical, {bad} different")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
