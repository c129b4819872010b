"""Commands on a cached trace (its tables and analysis read from the cache), as whole processes, each
run alternating with the others, and between this install and the same with other packages first on
the path.

    python benchmarks/cached_command.py TRACE [--repeat 5] [--command "targets"] [--site NAME=DIR ...]
                                        [--tree NAME=DIR ...] [--first] [--no-replay] [--out results.json]

`--command` (repeatable; default `classify --json`): a headroom command line, the trace appended.
`--site typer29=/tmp/typer29`: a folder of packages (e.g. `pip install --no-deps --target /tmp/typer29
typer==0.29.2 pydantic pydantic_core annotated_types typing_inspection`) put first on PYTHONPATH for the
runs named NAME. `--tree old=/tmp/old`: a checkout of another commit (`git worktree add /tmp/old COMMIT`),
run from its folder (so that its `headroom` is imported) with a cache of its own; a `--site` and a `--tree`
of one NAME combine (that checkout, those packages first). Bytecode is written as an install has it
(PYTHONDONTWRITEBYTECODE is dropped) and one run of each fills the cache and the bytecode before the timed ones;
the runs alternate, the order
turning each round. `--first`: the other measure, each run the first command on the trace (its cache
emptied before it: the load, the analysis and writing the entry). `--no-replay`: HEADROOM_REPLAY=off, so each
run reads the cached analysis and computes its output, as a *different* second command does (otherwise a
command run before on the same trace writes its recorded output: headroom/cli/replay.py).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.record import emit, stamp  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--command", action="append", default=[], metavar="'CMD ARGS'")
    ap.add_argument("--site", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--first", action="store_true", help="time the first command (an empty cache each run)")
    ap.add_argument("--no-replay", action="store_true", help="HEADROOM_REPLAY=off: no recorded output written")
    ap.add_argument("--out")
    args = ap.parse_args()
    sites: dict[str, tuple[str | None, Path]] = {"this install": (None, REPO)}  # name: (packages first, checkout)
    for spec, is_site in [(s, True) for s in args.site] + [(t, False) for t in args.tree]:
        name, _, folder = spec.partition("=")
        if not name or not Path(folder).is_dir():
            raise SystemExit(f"{spec}: expected NAME=DIR of a folder")
        packages, tree = sites.get(name, (None, REPO))
        sites[name] = (folder, tree) if is_site else (packages, Path(folder).resolve())
    commands = args.command or ["classify --json"]
    variants = {
        (f"{c}" if len(sites) == 1 else f"{c} [{s}]"): (shlex.split(c), site)
        for c in commands
        for s, site in sites.items()
    }
    with tempfile.TemporaryDirectory() as cache:
        base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        if args.no_replay:
            base["HEADROOM_REPLAY"] = "off"

        def run(words: list[str], site: tuple[str | None, Path]) -> float:
            folder, tree = site
            env = dict(base)
            env["HEADROOM_CACHE_DIR"] = os.path.join(
                cache, hashlib.sha1(str(tree).encode()).hexdigest()[:8]
            )  # one per checkout
            if args.first:
                shutil.rmtree(env["HEADROOM_CACHE_DIR"], ignore_errors=True)
            if folder:
                env["PYTHONPATH"] = folder + os.pathsep + env.get("PYTHONPATH", "")
            command = [sys.executable, "-m", "headroom.cli", *words, str(args.trace.resolve())]
            t0 = time.perf_counter()
            p = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tree)
            seconds = time.perf_counter() - t0
            if p.returncode != 0:
                raise SystemExit(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
            return seconds

        for words, site in variants.values():  # the cache, and each variant's bytecode
            run(words, site)
        runs: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for i in range(args.repeat):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                runs[name].append(round(run(*variants[name]), 3))
    emit(
        {
            "trace": str(args.trace),
            "measure": "first command" if args.first else "cached, no replay" if args.no_replay else "cached",
            "commands": {n: " ".join(["headroom", *w, str(args.trace)]) for n, (w, _) in variants.items()},
            "trees": {name: str(tree) for name, (_, tree) in sites.items()},
            "packages_first": {name: packages for name, (packages, _) in sites.items() if packages},
            "runs_s": runs,
            "median_s": {k: round(statistics.median(v), 3) for k, v in runs.items()},
            **stamp(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
