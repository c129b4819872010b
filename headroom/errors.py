"""Errors a user can cause. The CLI prints them as one line and exits 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """Bad input: a missing file, an unknown name, an invalid value.

    The message is one line that names the thing and the problem.
    """


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`" (did you mean 'embedding'?)"` for a near miss among `choices`, else `""`."""
    close = difflib.get_close_matches(str(name).lower(), sorted({str(c).lower() for c in choices}), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_name(what: str, name: str, choices: Iterable[str], where: str = "") -> UserError:
    """`where: unknown category 'embeding' (did you mean 'embedding'?)`, or the list of choices."""
    choices = sorted(set(choices))
    hint = did_you_mean(name, choices) or f" (one of: {', '.join(choices)})"
    return UserError(f"{where + ': ' if where else ''}unknown {what} {name!r}{hint}")


def library_warnings_in_one_style() -> None:
    """Python warnings of the libraries headroom drives (torch's profiler, transformers) as
    `headroom: warning: <Category>: <message>`, one line each, instead of Python's two lines naming a
    file inside the library. Python's filters still apply (each is shown once per place). Here, beside
    UserError, so that the command line and a worker process of any layer (validate's) share it."""
    import sys
    import warnings

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = " ".join(str(message).split())
        print(f"headroom: warning: {category.__name__}: {text}", file=sys.stderr if file is None else file, flush=True)

    warnings.showwarning = show
