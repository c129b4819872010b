"""Errors a user can cause. The CLI prints them as one line and exits 2."""


class UserError(Exception):
    """Bad input: a missing file, an unknown name, an invalid value.

    The message is one line that names the thing and the problem.
    """
