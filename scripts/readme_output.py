"""Regenerate the command output README.md and docs/*.md show, from the commands themselves on the shipped traces.

Every fenced block in a page whose first line is `$ headroom ...` is run (as
`python -m headroom.cli ...`, from the repository root) and its body replaced with what the
command printed on stdout (exit status 0, or 1: a verdict other than pass). A command may end in `| head -N` or
`| tail -N`: only its first or last N lines are shown.
`--check` changes nothing and exits 1 when a block is out of date.

    python scripts/readme_output.py                # rewrite README.md
    python scripts/readme_output.py --all          # README.md and every docs/*.md page with such a block
    python scripts/readme_output.py docs/gpu-results.md --check   # is that page's output current?
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```\n\$ (headroom [^\n]*)\n(.*?)^```$", re.S | re.M)
CUT = re.compile(r"^(headroom .*?)(?: \| (head|tail) -(\d+))?$")


def run(command: str) -> str:
    args = shlex.split(command)[1:]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "headroom.cli", *args], cwd=REPO, capture_output=True, text=True, env=env, check=False
    )
    if p.returncode not in (0, 1):  # 1: a verdict other than pass (verify), a regression (diff)
        raise SystemExit(f"readme_output: `{command}` exited {p.returncode}: {p.stderr.strip()}")
    return "\n".join(line.rstrip() for line in p.stdout.rstrip("\n").splitlines()) + "\n"


def shown(line: str) -> str:
    """What the README shows under `$ LINE`: the command's stdout, cut to N lines by a trailing `| head -N`
    (the first N) or `| tail -N` (the last N)."""
    command, cut, n = CUT.match(line).groups()
    lines = run(command).splitlines(keepends=True)
    return "".join(lines if cut is None else lines[: int(n)] if cut == "head" else lines[-int(n) :])


def regenerate(text: str) -> str:
    return BLOCK.sub(lambda m: f"```\n$ {m.group(1)}\n{shown(m.group(1))}```", text)


def pages(argv: list[str]) -> list[Path]:
    """The pages named on the command line; README.md by default; with --all, README.md and every docs page
    that shows a command's output."""
    named = [REPO / a for a in argv if not a.startswith("--")]
    if "--all" in argv:
        named = [REPO / "README.md"] + [p for p in sorted((REPO / "docs").glob("*.md")) if BLOCK.search(p.read_text())]
    return named or [REPO / "README.md"]


def main(argv: list[str]) -> int:
    stale = []
    for page in pages(argv):
        old = page.read_text()
        new = regenerate(old)
        if new != old:
            stale.append(page.relative_to(REPO))
            if "--check" not in argv:
                page.write_text(new)
    if stale and "--check" in argv:
        print(
            f"{', '.join(map(str, stale))}: the shown command output is out of date "
            "(run python scripts/readme_output.py --all)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
