"""The loader's regression check: fails when a change makes the first command's work cost more than 20% more.

    python benchmarks/regression.py [--trace T] [--rounds 7] [--write-baseline]
    python benchmarks/regression.py --slow-extra-pass      # the check shown failing: the loader decodes twice

Timings of a shared 2-core machine vary by half from one hour to the next, so no time is compared with a
time: each round runs, in fresh processes one after the other, a **reference** (msgspec's generic decode of
the same file into Python objects and numpy columns of every event's `ts` and `dur`: the cost of reading the
JSON at all, which the machine's speed scales as it scales the loader) and the **loader** (import headroom,
`analyze(path, whole_trace=True, use_cache=False)`: load, attribute, classify, account, as `headroom classify
--no-cache` does, with the worker process off so that one core's work is compared with one core's). A
round's ratio is loader / reference; the check takes the **median of the rounds' ratios** (one slow round
moves it by one place, not by its size) and fails when it exceeds the committed baseline's by more than
`--tolerance` (20%). The loader's peak RSS per MB of trace is held to the same tolerance (memory is not
noisy, but is checked the same way). The baseline is `benchmarks/results/regression_baseline.json`, written
by `--write-baseline` on this machine from the same rounds.

The trace is the training shape (`benchmarks/shapes.py`) at `--mb` MB, built under the temporary directory
unless `--trace` names one. `--slow-extra-pass` (the loader decodes the file a second time) and
`--inject-sleep S` slow the loader on purpose, to show the check failing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = REPO / "benchmarks" / "results" / "regression_baseline.json"
TOLERANCE = 0.20


@dataclass
class Verdict:
    """The check's outcome: the medians compared with the baseline's, and the lines that say why it failed."""

    ratio: float
    baseline_ratio: float
    rss_per_mb: float
    baseline_rss_per_mb: float
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def compare(rounds: list[dict], baseline: dict, tolerance: float = TOLERANCE) -> Verdict:
    """Judge rounds of {"loader_s", "reference_s", "loader_rss_mb", "mb"} against a baseline of {"ratio",
    "rss_per_mb"}: the median of the per-round ratios loader/reference, and the median peak RSS per MB,
    each failing when above the baseline's by more than `tolerance`."""
    if not rounds:
        raise ValueError("no rounds to compare")
    ratio = statistics.median(r["loader_s"] / r["reference_s"] for r in rounds)
    rss = statistics.median(r["loader_rss_mb"] / r["mb"] for r in rounds)
    v = Verdict(ratio, baseline["ratio"], rss, baseline["rss_per_mb"])
    if ratio > baseline["ratio"] * (1 + tolerance):
        v.failures.append(
            f"the loader takes {ratio:.2f}x the reference (median of {len(rounds)} rounds), the "
            f"baseline {baseline['ratio']:.2f}x: {ratio / baseline['ratio'] - 1:+.0%}, more than "
            f"{tolerance:.0%}"
        )
    if rss > baseline["rss_per_mb"] * (1 + tolerance):
        v.failures.append(
            f"the loader's peak RSS is {rss:.2f} MB per MB of trace, the baseline "
            f"{baseline['rss_per_mb']:.2f}: {rss / baseline['rss_per_mb'] - 1:+.0%}, more than "
            f"{tolerance:.0%}"
        )
    return v


# --- the two measured processes ------------------------------------------------------------------


def _reference(path: Path) -> None:
    import gc

    import msgspec
    import numpy as np

    gc.disable()  # as the loader does: millions of objects would be rescanned for nothing
    events = msgspec.json.decode(path.read_bytes())["traceEvents"]
    ts = np.array([e.get("ts", np.nan) for e in events], dtype=np.float64)
    dur = np.array([e.get("dur", np.nan) for e in events], dtype=np.float64)
    assert len(ts) == len(dur) == len(events)


def _loader(path: Path, extra_pass: bool, sleep_s: float) -> None:
    from headroom.trace import chunks, document
    from headroom.trace.analysis import analyze

    if extra_pass:  # a deliberately slowed loader: every file decoded a second time
        decode_chunks = chunks.decode_chunks

        def twice(p, source, *a, **k):
            decode_chunks(p, document.split(p), None)
            return decode_chunks(p, source, *a, **k)

        chunks.decode_chunks = twice
    if sleep_s:
        time.sleep(sleep_s)
    analyze(path, whole_trace=True, use_cache=False)


def _child(what: str, path: Path, extra_pass: bool, sleep_s: float) -> None:
    t0 = time.perf_counter()
    if what == "reference":
        _reference(path)
    else:
        _loader(path, extra_pass, sleep_s)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"s": wall, "rss_mb": rss}), flush=True)
    os._exit(0)  # the interpreter's teardown is no part of either


def _run(what: str, path: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", what, "--trace", str(path)]
    if args.slow_extra_pass:
        cmd.append("--slow-extra-pass")
    if args.inject_sleep:
        cmd += ["--inject-sleep", str(args.inject_sleep)]
    env = dict(os.environ, HEADROOM_LOAD_WORKERS="0", PYTHONPATH=str(REPO))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# --- the check -----------------------------------------------------------------------------------


def _trace(args: argparse.Namespace) -> Path:
    if args.trace is not None:
        return args.trace
    sys.path.insert(0, str(REPO))
    from benchmarks.shapes import SHAPES, build

    path = Path(tempfile.gettempdir()) / f"headroom-regression-training-{args.mb:g}mb.json"
    if not path.exists():
        build(SHAPES["training"], args.mb, path)
    return path


def measure(path: Path, args: argparse.Namespace) -> list[dict]:
    """`args.rounds` rounds, each the reference then the loader, in fresh processes (one warm-up pair first,
    untimed: the file into the page cache, the modules' bytecode compiled)."""
    mb = path.stat().st_size / 1e6
    _run("reference", path, args)
    _run("loader", path, args)
    rounds = []
    for i in range(args.rounds):
        ref, load = _run("reference", path, args), _run("loader", path, args)
        rounds.append(
            {
                "mb": round(mb, 1),
                "reference_s": round(ref["s"], 3),
                "loader_s": round(load["s"], 3),
                "loader_rss_mb": round(load["rss_mb"], 1),
                "load_avg_1m": os.getloadavg()[0],
            }
        )
        print(
            f"round {i + 1}: reference {ref['s']:.2f} s, loader {load['s']:.2f} s "
            f"({load['s'] / ref['s']:.2f}x), loader peak {load['rss_mb']:.0f} MB",
            file=sys.stderr,
            flush=True,
        )
    return rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tolerance", type=float, default=TOLERANCE)
    ap.add_argument("--baseline", type=Path, default=BASELINE)
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--slow-extra-pass", action="store_true")
    ap.add_argument("--inject-sleep", type=float, default=0.0)
    ap.add_argument("--child", choices=("reference", "loader"))
    args = ap.parse_args()
    if args.child:
        return _child(args.child, args.trace, args.slow_extra_pass, args.inject_sleep)
    path = _trace(args)
    rounds = measure(path, args)
    sys.path.insert(0, str(REPO))
    from benchmarks.record import stamp

    ratio = statistics.median(r["loader_s"] / r["reference_s"] for r in rounds)
    rss = statistics.median(r["loader_rss_mb"] / r["mb"] for r in rounds)
    result = {
        "command": " ".join(sys.argv),
        "trace_mb": rounds[0]["mb"],
        "rounds": rounds,
        "ratio": round(ratio, 3),
        "rss_per_mb": round(rss, 3),
        **stamp(),
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.write_baseline:
        args.baseline.write_text(json.dumps(result, indent=1) + "\n")
        print(f"baseline written: {ratio:.2f}x the reference, {rss:.2f} MB per MB ({args.baseline})")
        return
    v = compare(rounds, json.loads(args.baseline.read_text()), args.tolerance)
    print(
        f"loader / reference: {v.ratio:.2f}x (baseline {v.baseline_ratio:.2f}x); peak RSS {v.rss_per_mb:.2f} "
        f"MB per MB (baseline {v.baseline_rss_per_mb:.2f})"
    )
    for line in v.failures:
        print(f"FAIL: {line}")
    if v.failures:
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
