"""``python -m headroom.suites --write | --check``: regenerate (or check) headroom/data/problems.toml."""

from __future__ import annotations

import sys

from headroom.suites.catalogue import PROBLEMS_TOML, problems_toml, write_problems_toml


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        write_problems_toml()
        print(f"wrote {PROBLEMS_TOML}")
        return 0
    if argv == ["--check"]:
        if PROBLEMS_TOML.read_text() == problems_toml():
            return 0
        print(f"{PROBLEMS_TOML} is out of date: run python -m headroom.suites --write", file=sys.stderr)
        return 1
    print("usage: python -m headroom.suites --write | --check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
