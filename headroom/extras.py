"""The optional parts of headroom and the extra that installs each (pip install 'kernel-headroom[EXTRA]').

The core (classify, report, annotate, project, targets, plot) needs none of them.
"""

from __future__ import annotations

import importlib.util

from headroom.errors import UserError

DISTRIBUTION = "kernel-headroom"
# Importable module -> the extra that installs it.
EXTRA_OF_MODULE = {
    "torch": "profile",
    "transformers": "profile",
    "nvtx": "profile",
    "torchrec": "recsys",
    "fbgemm_gpu": "recsys",
    "ray": "fleet",
}


def install_hint(extra: str) -> str:
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing(module: str, command: str, extra: str | None = None) -> UserError:
    """The one-line error for a command that needs an optional module this install lacks."""
    extra = extra or EXTRA_OF_MODULE.get(module, "all")
    return UserError(f"`headroom {command}` needs {module}, which is not installed: {install_hint(extra)}")


def require(module: str, command: str, extra: str | None = None) -> None:
    """Fail with one line before `command` starts when `module` is not importable here."""
    if importlib.util.find_spec(module) is None:
        raise missing(module, command, extra)
