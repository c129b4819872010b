"""The `headroom` command: a thin layer over the Python API.

Each command group lives in its own module (`headroom/cli/*.py`) and registers itself on
the one typer app; every user error becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import sys

import typer

from headroom.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="How much faster does a real model get if someone writes a faster GPU kernel?",
)


def _register_commands() -> None:
    from headroom.cli import extract, profile, project, trace, verify

    for module in (trace, profile, project, verify, extract):
        module.register(app)


def fail(message: str) -> typer.Exit:
    """Print one line to stderr and return the exit to raise (code 2)."""
    print(f"headroom: error: {message}", file=sys.stderr)
    return typer.Exit(code=2)


def main() -> None:
    _register_commands()
    try:
        app()
    except UserError as e:
        print(f"headroom: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("headroom: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
