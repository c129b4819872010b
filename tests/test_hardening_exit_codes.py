"""Hardening, class "exit codes" (issue 46): a stdout closed by its reader is exit 141 for every command,
`--json` documents and `bench list` included (typer turned it into 1, the verdict code).

Generated: commands drawn from those that print a result, run with a stdout already closed."""

from __future__ import annotations

import os
import subprocess
import sys

from hardening_support import REPO, SMALL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

COMMANDS = (
    ["report", "--json", SMALL],
    ["classify", "--json", SMALL],
    ["classify", SMALL],
    ["project", "--json", "-s", "category:embedding=2", SMALL],
    ["targets", "--json", SMALL],
    ["diff", "--json", SMALL, SMALL],
    ["bench", "list"],
    ["workloads", "--json"],
    ["targets", SMALL],
)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(COMMANDS))
def test_a_closed_stdout_is_141(command):
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first byte
    try:
        p = subprocess.run(
            [sys.executable, "-m", "headroom.cli", *map(str, command)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    finally:
        os.close(write)
    assert p.returncode == 141, (command, p.returncode, p.stderr[-400:])
    assert "Traceback" not in p.stderr
