"""The loader's decode of one chunk: the C scanner against msgspec's typed structs, on every chunk of a trace,
interleaved (msgspec, scanner, msgspec, ...), in this process; each chunk's tables are checked equal.

    python benchmarks/scan_speed.py TRACE [--repeat 3] [--out results.json]

Times are of `kineto.decode_events` (msgspec) and `scan.decode_events` (the scanner; routing and the tables'
polars columns in both), summed over the chunks; `scan_only_s` is the C scanner's own part. The chunks are
cut by document.split first (not timed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for benchmarks.record

from polars.testing import assert_frame_equal  # noqa: E402

import headroom.trace.document as document  # noqa: E402
import headroom.trace.kineto as kineto  # noqa: E402
import headroom.trace.scan as scan  # noqa: E402
from benchmarks.record import emit, stamp  # noqa: E402


def _chunks(path: Path) -> list[bytes]:
    out = []
    for item in document.split(path):
        if isinstance(item, document.Document):
            return out
        out.append(bytes(item[0]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    if scan.SCANNER is None:
        sys.exit("the C scanner is not built (pip install -e . builds it)")
    docs = _chunks(args.trace)
    scanner = scan.SCANNER
    scan.decode_events(docs[0])  # imports and first-use tables, before timing
    times: dict[str, list[float]] = {"msgspec": [], "scanner": [], "scan_only": []}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        reference = [kineto.decode_events(d) for d in docs]
        times["msgspec"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        scanned = [scan.decode_events(d) for d in docs]
        times["scanner"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        declined = sum(scanner.scan(d) is None for d in docs)
        times["scan_only"].append(time.perf_counter() - t0)
        for a, b in zip(scanned, reference):
            assert a.events == b.events and a.unreadable == b.unreadable
            for t in kineto.TABLES:
                assert_frame_equal(a.tables[t], b.tables[t], categorical_as_str=True)
        del reference, scanned
    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    mb = sum(map(len, docs)) / 1e6
    emit(
        {
            "trace": str(args.trace),
            "mb": round(mb, 1),
            "chunks": len(docs),
            "declined_chunks": declined,
            "runs_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
            "median_s": med,
            "mb_per_s": {k: round(mb / v, 1) for k, v in med.items()},
            "msgspec_over_scanner": round(med["msgspec"] / med["scanner"], 2),
            **stamp(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
