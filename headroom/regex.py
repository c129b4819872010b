"""Regular expressions a user writes (rules, selectors, `--window`): compiled by RE2.

RE2 matches in time linear in the text, whatever the pattern, so a rule like `(.*a){25}`
cannot hang a run the way a backtracking engine (Python's `re`) does on it. Its syntax is
Perl's without backreferences and look-around; a pattern it cannot compile is a UserError
that names where it came from. Matching is case-insensitive, as the rules file documents.
"""

from __future__ import annotations

from typing import Protocol

import re2

from headroom.errors import UserError


class Pattern(Protocol):
    pattern: str

    def search(self, text: str): ...


def _options() -> re2.Options:
    o = re2.Options()
    o.case_sensitive = False
    o.log_errors = False  # RE2 would print parse errors to stderr itself
    return o


_OPTIONS = _options()


def compile_user_regex(pattern: object, where: str) -> Pattern:
    """Compile `pattern` (case-insensitive) or raise a UserError: `where: bad regex '(' (missing ): ()`."""
    if not isinstance(pattern, str):
        raise UserError(f"{where}: a regex must be a string, got {pattern!r}")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        reason = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise UserError(
            f"{where}: bad regex {pattern!r} ({reason}; RE2 syntax: no look-around or backreferences)"
        ) from None
