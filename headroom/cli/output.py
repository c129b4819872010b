"""How every `headroom` command talks to its user (docs/cli.md, "Conventions").

* **stdout carries results only**: the tables, or with `--json` the JSON documents. Everything
  else (warnings, notes, progress) goes to stderr, so `headroom X --json | jq` always works.
* **One style on stderr**: `headroom: warning: <message>` and `headroom: error: <message>`,
  one line each, naming the file or option concerned.
* **Exit codes**: 0 done; 1 a verdict that is not a pass (`verify`); 2 bad input or an OS
  error (one line on stderr); 130 interrupted (Ctrl-C). Commands over several inputs report
  the good ones, name each bad one on stderr and exit 2 at the end.
* **JSON**: microseconds for every time (`*_us`), never NaN/Infinity (null instead), and a
  `"schema": "headroom.<document>/<version>"` key first in every document. Commands over
  several traces print one document per line (JSON lines); the others one document.

New commands use these helpers rather than printing themselves.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from headroom.errors import library_warnings_in_one_style  # noqa: F401 - one style, shared with workers
from headroom.jsonio import dumps

EXIT_OK = 0
EXIT_VERDICT = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141  # stdout closed by its reader
EXIT_TERMINATED = 143  # SIGTERM

SCHEMA_VERSION = 1


def warn(message: str) -> None:
    """`headroom: warning: message` on stderr."""
    print(f"headroom: warning: {message}", file=sys.stderr, flush=True)


def error(message: str) -> None:
    """`headroom: error: message` on stderr (the caller decides the exit code)."""
    print(f"headroom: error: {message}", file=sys.stderr, flush=True)


def document(name: str, body: dict[str, Any], version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """A JSON document: `{"schema": "headroom.<name>/<version>", **body}`."""
    return {"schema": f"headroom.{name}/{version}", **{k: v for k, v in body.items() if k != "schema"}}


def emit_json(name: str, body: dict[str, Any], indent: int | None = None, version: int = SCHEMA_VERSION) -> None:
    """Print one JSON document (strict JSON: NaN/Infinity become null) on stdout."""
    print(dumps(document(name, body, version), indent=indent), flush=True)


@contextlib.contextmanager
def progress(label: str) -> Iterator[None]:
    """A transient spinner on stderr while slow work runs, shown only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    from headroom.cli import replay

    if not replay.recording():
        with Console(stderr=True).status(label, spinner="dots"):
            yield
        return
    # While a command is recorded its spinner's frames go to the terminal unrecorded, and what is printed
    # meanwhile stays on the recorded streams (a status would redirect them to its console).
    from rich.live import Live
    from rich.spinner import Spinner

    with Live(
        Spinner("dots", text=label),
        console=Console(file=replay.terminal(sys.stderr)),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
        refresh_per_second=12.5,
    ):
        yield
