"""The `headroom` command: a thin layer over the Python API.

Each command group lives in its own module (`headroom/cli/*.py`) and registers itself on
the one typer app; every user error becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import sys

import typer

from headroom.errors import UserError
from headroom.extras import EXTRA_OF_MODULE, missing

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="How much faster does a real model get if someone writes a faster GPU kernel?",
)


def _register_commands() -> None:
    from headroom.cli import profile, project, trace, verify

    for module in (trace, profile, project, verify):
        module.register(app)


# The extra a command's optional modules come from (the core commands need none).
_EXTRA_OF_COMMAND = {"profile": "profile", "workloads": "profile", "verify": "verify", "bench": "verify"}


def main() -> None:
    _register_commands()
    try:
        app()
    except UserError as e:
        print(f"headroom: error: {e}", file=sys.stderr)
        sys.exit(2)
    except ModuleNotFoundError as e:
        module = (e.name or "").split(".")[0]
        if module not in EXTRA_OF_MODULE:
            raise
        command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
        extra = _EXTRA_OF_COMMAND.get(command) if module == "torch" else None
        print(f"headroom: error: {missing(module, command, extra)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("headroom: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
