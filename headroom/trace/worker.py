"""The loader's worker process: decodes the chunks it is sent (kineto.decode_events) and sends back the result.

A plain subprocess speaking length-prefixed pickles over its stdin/stdout, not
multiprocessing: spawn would re-run the user's script (or notebook cell) in
the worker, and fork is unsafe once polars' thread pool runs.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

_LENGTH = struct.Struct("<Q")


def _send(stream, payload: bytes) -> None:
    stream.write(_LENGTH.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _receive(stream) -> bytes | None:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (n,) = _LENGTH.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("the worker's pipe closed mid-message")
    return data


class Worker:
    """One worker process; `submit` a chunk, then `result` it before submitting the next."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
                   HEADROOM_LOAD_WORKERS="0")
        self.process = subprocess.Popen([sys.executable, "-c", "from headroom.trace.worker import main; main()"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.busy = False

    def submit(self, data: bytes) -> None:
        _send(self.process.stdin, data)
        self.busy = True

    def result(self):
        payload = _receive(self.process.stdout)
        self.busy = False
        if payload is None:
            raise EOFError("the loader's worker process ended")
        return pickle.loads(payload)

    def close(self) -> None:
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:   # pragma: no cover
            self.process.kill()
            self.process.wait()


def main() -> None:
    import gc

    from headroom.trace.kineto import decode_events
    gc.disable()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        data = _receive(stdin)
        if data is None:
            return
        _send(stdout, pickle.dumps(decode_events(data), protocol=pickle.HIGHEST_PROTOCOL))
