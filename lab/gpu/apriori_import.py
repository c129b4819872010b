#!/usr/bin/env python3
"""Add whole-loop runs of lab/gpu/gpu_validate.py to docs/gpu/apriori/ as a-priori rows.

    tar xzf runs-1.tar.gz -C /tmp/new            # each <name>/: run.json, result.json, base/variant traces, loop/
    python3 lab/gpu/apriori_import.py /tmp/new/*/ [--root docs/gpu/apriori]

Per run directory, the row's directory gets what `python -m headroom.report.apriori` reads: the base trace
(and its capture trace, captures/base.json.gz, from `validate --graphs`), run.json (the rounds), result.json
(validate's result, which holds validate's estimate), verify.json and the problem's entry (from loop/). Rows
run under graphs go to their own root: `--root docs/gpu/graphs-apriori`.
A run whose verify did not pass has no a-priori estimate and is refused; an existing row is refused (remove
it first to replace it). Then refit and check the interval:
`python -m headroom.report.calibration docs/gpu/apriori --write`.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def import_run(run: Path, root: Path) -> str:
    verify, entries = run / "loop" / "verify.json", sorted((run / "loop" / "problem").glob("*.toml"))
    need = [run / "base.json.gz", run / "run.json", run / "result.json", verify]
    missing = [str(p.relative_to(run)) for p in need if not p.is_file()]
    if missing or len(entries) != 1:
        return f"{run}: not a whole-loop run (missing {', '.join(missing) or 'loop/problem/*.toml'})"
    if json.loads(verify.read_text()).get("verdict") != "pass":
        return f"{run}: verify did not pass: no a-priori estimate"
    dest = root / run.name
    if dest.exists():
        return f"{dest}: exists"
    dest.mkdir(parents=True)
    for p in need[:3] + [verify, entries[0]]:
        shutil.copyfile(p, dest / p.name)
    if (run / "captures").is_dir():  # validate --graphs: the base trace's manifest names its capture trace
        (dest / "captures").mkdir()
        shutil.copyfile(run / "captures" / "base.json.gz", dest / "captures" / "base.json.gz")
    return f"{dest}: added"


def main(argv: list[str]) -> int:
    root = Path("docs/gpu/apriori")
    if "--root" in argv:
        i = argv.index("--root")
        root, argv = Path(argv[i + 1]), argv[:i] + argv[i + 2 :]
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = [import_run(Path(a), root) for a in argv]
    print("\n".join(out))
    return 0 if all(o.endswith(": added") for o in out) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
