"""Hardening, the Ctrl-C promise (issue 46): from the first line of headroom's own code, a Ctrl-C ends the
command with 130 and one line, never a traceback. The handler is taken over when `headroom.cli` is imported
as the program (before runpy runs `__main__`), not in `main()` only.

What comes before headroom's first line is the interpreter's start-up (site and the venv's .pth files: an
editable install's finder alone takes ~40 ms here); a Ctrl-C there is Python's, and its traceback holds no
frame of headroom's. Generated: the delay of the SIGINT after the process starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from hardening_support import REPO, SMALL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(delay=st.floats(min_value=0.0, max_value=0.6))
def test_ctrl_c_from_headrooms_first_line_is_130(delay):
    p = subprocess.Popen(
        [sys.executable, "-m", "headroom.cli", "classify", "--no-cache", str(SMALL)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "HEADROOM_CACHE_DIR": "off"},
    )
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    text = err.decode(errors="replace")
    if "Traceback" in text:  # the interpreter's start-up, before any of headroom's code
        assert f"{os.sep}headroom{os.sep}" not in text.split("Traceback", 1)[1], text[-1500:]
    else:
        assert p.returncode in (130, -signal.SIGINT, 0), (p.returncode, text[-500:])
