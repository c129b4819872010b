"""`python -m headroom.validate.collect DIR... > validation.json`: the results of saved validate runs,
recomputed from their traces and timings (`recompute`), as one JSON list (docs/validation.md)."""

from __future__ import annotations

import sys

from headroom.errors import UserError
from headroom.jsonio import dumps
from headroom.validate.result import recompute


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m headroom.validate.collect RUN_DIR...", file=sys.stderr)
        return 2
    try:
        results = [recompute(d) for d in argv]
    except UserError as e:
        print(f"headroom: error: {e}", file=sys.stderr)
        return 2
    print(dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
