"""The typer app, and the one place where errors become exit codes (docs/cli.md)."""

from __future__ import annotations

import copy
import math
import os
import signal
import sys
from typing import Any

import typer

from headroom._version import __version__
from headroom.cli.output import (
    EXIT_INTERRUPTED,
    EXIT_PIPE,
    EXIT_TERMINATED,
    EXIT_USAGE,
    error,
    library_warnings_in_one_style,
)
from headroom.errors import UserError
from headroom.extras import EXTRA_OF_MODULE, missing

# typer raises click's exceptions, or those of the copy of click that newer typers ship.
_exc: Any
try:
    from typer._click import exceptions as _exc
except ImportError:  # typer that depends on click
    from click import exceptions as _exc
_NoArgsIsHelp = getattr(_exc, "NoArgsIsHelpError", ())
_Abort = getattr(_exc, "Abort", typer.Abort)


def _plain_help() -> None:
    """Help without `<bool>` beside flags and `<list[Path]>` beside named arguments: a flag takes no
    value, and an argument's metavar (TRACE...) already says what it takes. Choices stay listed.
    (typer before 0.29 shows no `<bool>`, and `<path>` beside an argument: nothing to change there.)"""
    try:
        from typer.core import TyperArgument, TyperOption
    except ImportError:  # a typer without these classes shows no types anyway
        return
    arg_type = getattr(TyperArgument, "display_type_rich", None)
    opt_type = getattr(TyperOption, "display_type_rich", None)
    if arg_type is None or opt_type is None:
        return
    if getattr(arg_type, "_headroom", False):
        return

    def argument(self, ctx):
        return None if self.metavar is not None else arg_type(self, ctx)

    def option(self, ctx):
        return None if getattr(self, "is_flag", False) else opt_type(self, ctx)

    setattr(argument, "_headroom", True)
    setattr(option, "_headroom", True)
    setattr(TyperArgument, "display_type_rich", argument)
    setattr(TyperOption, "display_type_rich", option)


_plain_help()


def _version(value: bool) -> None:
    if value:
        print(f"headroom {__version__}")
        raise typer.Exit()


app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="How much faster does a real model get if someone writes a faster GPU kernel?",
)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, metavar="", help="Print the version and exit."
    ),
) -> None:
    """How much faster does a real model get if someone writes a faster GPU kernel?"""


# The module that registers each command, in the order `headroom --help` lists them. A command line
# naming one of them imports and builds only that module's commands (typer builds every registered
# command's parameters when it runs); anything else (`--help`, a typo) registers them all.
# tests/test_cli_manners.py checks this map against what each module registers.
COMMAND_MODULES = {
    "classify": "trace",
    "annotate": "trace",
    "report": "trace",
    "profile": "profile",
    "workloads": "profile",
    "project": "project",
    "targets": "project",
    "plot": "project",
    "coverage": "coverage",
    "diff": "diff",
    "verify": "verify",
    "extract": "extract",
    "validate": "extract",
    "bench": "verify",
}  # a group of commands: typer lists groups last
_registered: set[str] = set()


def register_commands(argv: list[str] | None = None) -> None:
    """Register the commands of the module `argv` names; all of them when it names none (or is None)."""
    import importlib

    command = next((a for a in argv or [] if not a.startswith("-")), None)
    wanted = [COMMAND_MODULES[command]] if command in COMMAND_MODULES else list(dict.fromkeys(COMMAND_MODULES.values()))
    for name in wanted:
        if name in _registered:  # run() may be called more than once in one process (tests, notebooks)
            continue
        importlib.import_module(f"headroom.cli.{name}").register(app)
        _registered.add(name)
    order = list(COMMAND_MODULES)  # the help's order, whichever command was registered first
    app.registered_commands.sort(key=lambda c: order.index(_command_name(c)))
    app.registered_groups.sort(key=lambda g: order.index(g.name or ""))


def _command_name(info) -> str:
    return info.name or info.callback.__name__.replace("_", "-")


# The extra a command's optional modules come from (the core commands need none).
_EXTRA_OF_COMMAND = {
    "profile": "profile",
    "workloads": "profile",
    "extract": "profile",
    "validate": "profile",
    "verify": "verify",
    "bench": "verify",
}


def _usage_line(e: Any) -> str:
    cmd = e.ctx.command_path if e.ctx is not None else "headroom"
    cmd = "headroom" + cmd[cmd.index(" ") :] if " " in cmd else "headroom"
    return f"{e.format_message()} (see '{cmd} --help')"


_terminated = False  # the interrupt was a SIGTERM (exit 143), not a Ctrl-C


def _on_sigterm(signum, frame) -> None:
    """SIGTERM: stop as Ctrl-C stops (every `finally`, then the exit handlers), and leave with 143."""
    global _terminated
    _terminated = True
    raise KeyboardInterrupt


def _interrupted() -> None:
    """Ctrl-C (or SIGTERM): every `finally` has run; the exit handlers run too (temporary folders, a stream's
    copy, child processes), then say so and leave with 130 (143) at once, so that no second interrupt during
    the interpreter's shutdown turns it into a traceback or a kill."""
    import atexit

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        getattr(atexit, "_run_exitfuncs", lambda: None)()
    except BaseException:  # an exit handler that fails cannot keep the process alive
        pass
    try:
        sys.stdout.flush()
    except Exception:  # a closed pipe: nothing more to say there
        pass
    print(f"headroom: {'terminated' if _terminated else 'interrupted'}", file=sys.stderr, flush=True)
    os._exit(EXIT_TERMINATED if _terminated else EXIT_INTERRUPTED)


def run(argv: list[str] | None = None) -> None:
    """Run the command line; exit 0, 1 (verdict), 2 (bad input, one line on stderr), 130 (Ctrl-C) or
    143 (SIGTERM)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on: clean up, then exit 130
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    library_warnings_in_one_style()
    try:
        code = dispatch(argv)
        # Done: a Ctrl-C now has nothing left to stop, and must not kill the interpreter while it
        # shuts down (Python restores the default handler then: the process would die by SIGINT).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:  # while an error was being reported
        _interrupted()
    sys.exit(code)


def _finite(t: Any) -> Any:
    """A click float type (a range too) that also refuses NaN and infinities: NaN passes every range
    check (`nan < 0` is false), so `--fail-if-slower nan` would disable the gate."""
    base = type(t)
    if getattr(base, "_headroom_finite", False):
        return t

    class Finite(base):  # type: ignore[valid-type, misc]
        _headroom_finite = True

        def convert(self, value, param, ctx):
            v = super().convert(value, param, ctx)
            if isinstance(v, float) and not math.isfinite(v):
                self.fail(f"{value!r} is not a finite number.", param, ctx)
            return v

    out = copy.copy(t)
    out.__class__ = Finite
    return out


def _finite_numbers(command: Any) -> Any:
    """Every float option and argument of `command` and its subcommands refuses NaN and infinities."""
    for p in getattr(command, "params", []):
        if any(c.__name__ == "FloatParamType" for c in type(p.type).__mro__):
            p.type = _finite(p.type)
    for sub in getattr(command, "commands", {}).values():
        _finite_numbers(sub)
    return command


def _stdout_closed() -> bool:
    """typer's command turns a closed stdout (EPIPE) into exit 1 and wraps sys.stdout to say nothing more:
    that exit is no verdict (docs/cli.md: 141)."""
    return type(sys.stdout).__name__.endswith("PacifyFlushWrapper")


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def dispatch(argv: list[str] | None) -> int:
    """Run the command `argv` names (None: the process's arguments); its exit status."""
    code = 0
    try:
        register_commands(sys.argv[1:] if argv is None else argv)
        command = _finite_numbers(typer.main.get_command(app))
        try:
            rv = command.main(args=argv, prog_name="headroom", standalone_mode=False)
        except SystemExit:
            if not _stdout_closed():
                raise
            rv = EXIT_PIPE
            _silence_stdout()
        code = rv if isinstance(rv, int) else 0
        if code == EXIT_INTERRUPTED:  # typer turns Ctrl-C inside a command into exit 130
            _interrupted()
    except UserError as e:
        error(str(e))
        code = EXIT_USAGE
    except ModuleNotFoundError as e:
        module = (e.name or "").split(".")[0]
        if module not in EXTRA_OF_MODULE:
            raise
        args = sys.argv[1:] if argv is None else argv
        command = next((a for a in args if not a.startswith("-")), "")
        extra = _EXTRA_OF_COMMAND.get(command) if module == "torch" else None
        error(str(missing(module, command, extra)))
        code = EXIT_USAGE
    except _NoArgsIsHelp:  # typer has printed the help
        code = EXIT_USAGE
    except _exc.UsageError as e:
        error(_usage_line(e))
        code = EXIT_USAGE
    except typer.Exit as e:
        code = e.exit_code
    except (KeyboardInterrupt, typer.Abort, _Abort):
        _interrupted()
    except _exc.ClickException as e:
        error(e.format_message())
        code = EXIT_USAGE
    except BrokenPipeError:
        # `headroom report --json | head`: the reader left; say nothing more.
        _silence_stdout()
        code = EXIT_PIPE
    except MemoryError:
        error("out of memory (the machine has too little free memory for this input)")
        code = EXIT_USAGE
    except OSError as e:
        # An OS error no command turned into a UserError yet: still one line, never a traceback.
        where = f"{e.filename}: " if e.filename else ""
        error(f"{where}{e.strerror or e}")
        code = EXIT_USAGE
    return code
