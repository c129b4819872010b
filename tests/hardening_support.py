"""Helpers of the hardening tests (issue 46): a command run in this process, and small damaged traces."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "traces"
HTA = Path("/work/shared/hta-traces")
SMALL = TRACES / "dlrm-int8.infer.json.gz"


def run(*args: object) -> tuple[int, str, str]:
    """`headroom ARGS` in this process: (exit code, stdout, stderr). An exception escaping is a traceback."""
    from headroom.cli.app import dispatch

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = dispatch([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def one_error_line(err: str) -> bool:
    """stderr ends with one `headroom: error:` line and holds no traceback."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return bool(lines) and lines[-1].startswith("headroom: error: ") and "Traceback" not in err


@cache
def _document(path: str) -> str:
    return gzip.open(path, "rt").read()


class Document(dict):
    """A trace's JSON document, shown short in a failing example."""

    def __repr__(self) -> str:
        return f"<trace document of {len(self.get('traceEvents', []))} events>"


def document(path: Path = SMALL) -> dict:
    """A fresh copy of a trace's JSON document."""
    return Document(json.loads(_document(str(path))))


def write(doc: dict, path: Path) -> Path:
    path.write_text(json.dumps(doc))
    return path
