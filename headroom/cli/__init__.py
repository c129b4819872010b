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


def _starting_as_the_program() -> bool:
    """This import is the `headroom` program starting (`python -m headroom.cli` while runpy imports the
    package, or the `headroom` console script), not a library or test importing the module."""
    import sys

    arg0 = sys.argv[0] if sys.argv else ""
    return arg0 == "-m" or os.path.basename(arg0) in ("headroom", "headroom.exe")


if _starting_as_the_program():
    # Ctrl-C from the first line of headroom's own code: before runpy runs __main__ and main() (the
    # interpreter's start-up before it, site and its .pth files, is Python's: docs/cli.md).
    try:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    except ValueError:  # not the main thread: nothing to take over
        pass


def main(argv: list[str] | None = None) -> None:
    """The `headroom` console script."""
    import sys

    from headroom.cli import replay

    signal.signal(signal.SIGINT, _interrupted_while_starting)
    words = sys.argv[1:] if argv is None else list(argv)
    if replay.replay(words):  # the same command on the same files printed this before
        done = SystemExit(0)
        _leave(done)
        raise done
    recorder = replay.start(words)
    from headroom.cli.app import run

    try:
        run(argv)
    except SystemExit as e:
        if recorder is not None:
            recorder.finish(e.code)
        _leave(e)
        raise


def _leave(e: SystemExit) -> None:
    """End the process without tearing the interpreter down, once what a normal exit does that anyone
    can see is done: the atexit handlers (temporary folders, child processes) and flushing stdout and
    stderr. Freeing every module and object (pandas, numpy, a cached analysis) cost a command on a
    cached trace 0.1-0.3 s of its 0.8 (docs/benchmarks.md). Returns, for the ordinary exit, when the
    code is not a number, another thread still runs (an exit joins it), or a stream cannot be flushed
    (the ordinary exit reports that)."""
    import atexit
    import sys
    import threading

    code = 0 if e.code is None else e.code
    run_exit_functions = getattr(atexit, "_run_exitfuncs", None)
    if not isinstance(code, int) or threading.active_count() > 1 or run_exit_functions is None:
        return
    run_exit_functions()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)
