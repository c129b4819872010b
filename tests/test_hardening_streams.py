"""Hardening, class "unbounded input" (issue 46): a trace read from a stream is bounded (it must start as a
trace does, and its copy may hold no more than the temporary folder's free space, less a reserve, or
HEADROOM_STREAM_MAX_BYTES), and nothing of the copy is left behind by an error, Ctrl-C or SIGTERM.

Generated: endless streams (zeros, random bytes, a JSON object that never ends), each either left to hit its
bound or stopped by SIGINT or SIGTERM a drawn delay after its copy began."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from hardening_support import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

STARTS = {"zeros": b"\0" * 4096, "random": os.urandom(4096), "endless-json": b'{"traceEvents": [' + b"{}, " * 1024}
REST = {"zeros": b"\0" * 65536, "random": os.urandom(65536), "endless-json": b"{}, " * 16384}


def _feed(pipe, kind: str, stop: threading.Event) -> None:
    try:
        pipe.write(STARTS[kind])
        while not stop.is_set():
            pipe.write(REST[kind])
            time.sleep(0.001)  # about 64 MB/s: a signal lands while the copy is under way
    except (BrokenPipeError, OSError, ValueError):
        pass


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from(sorted(STARTS)),
    stop=st.sampled_from([None, signal.SIGINT, signal.SIGTERM]),
    delay=st.floats(min_value=0.0, max_value=1.0),
)
def test_an_endless_stream_stops_and_leaves_nothing(tmp_path_factory, kind, stop, delay):
    tmp = tmp_path_factory.mktemp("tmp")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TMPDIR": str(tmp),
        "HEADROOM_STREAM_MAX_BYTES": str(200 << 20),
        "HEADROOM_CACHE_DIR": "off",
    }
    p = subprocess.Popen(
        [sys.executable, "-m", "headroom.cli", "classify", "/dev/stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=env,
    )
    done = threading.Event()
    feeder = threading.Thread(target=_feed, args=(p.stdin, kind, done), daemon=True)
    feeder.start()
    if stop is not None:
        # once the copy is under way (a loaded machine may take longer than `delay` to start Python)
        until = time.monotonic() + 20
        while (
            p.poll() is None
            and time.monotonic() < until
            and not any(n.name.startswith("headroom-stream-") for n in tmp.iterdir())
        ):
            time.sleep(0.01)
        time.sleep(delay)
        if p.poll() is None:
            p.send_signal(stop)
    try:
        _, err = p.communicate(timeout=30)
    finally:
        done.set()
        p.kill()
    text = err.decode(errors="replace")
    expected = {None: {2}, signal.SIGINT: {2, 130}, signal.SIGTERM: {2, 143}}[stop]
    assert p.returncode in expected, (p.returncode, text[-500:])
    assert "Traceback" not in text
    assert not any(n.name.startswith("headroom-stream-") for n in tmp.iterdir()), list(tmp.iterdir())
