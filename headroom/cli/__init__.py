"""The `headroom` command: a thin layer over the Python API.

Each command group lives in its own module (`headroom/cli/*.py`) and registers itself on
the one typer app (`headroom/cli/app.py`). How commands talk (stdout/stderr, exit codes,
JSON) is in `headroom/cli/output.py` and docs/cli.md: every user error becomes one line on
stderr and exit 2; Ctrl-C exits 130 at any moment, also while the modules are imported.

This module imports nothing heavy, so `main` can take Ctrl-C over before typer, pandas or
torch load (a second or more).
"""

from __future__ import annotations

import os
import signal


def _interrupted_while_starting(signum, frame) -> None:
    # Ctrl-C before the command runs: nothing has been written yet, so leave at once
    # (a KeyboardInterrupt here would print a traceback from inside an import).
    os.write(2, b"headroom: interrupted\n")
    os._exit(130)


def main(argv: list[str] | None = None) -> None:
    """The `headroom` console script."""
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    from headroom.cli.app import run

    run(argv)
