"""The loader's worker process: the pipe protocol and the parent's handle. The worker runs
`worker_main.main`: it decodes what it is sent and sends back the result: a chunk
(scan.decode_events), the second half of a plain file (chunks.decode_second_half) or a whole file
(load.decode).

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


def send(stream, *parts) -> None:
    stream.write(_LENGTH.pack(sum(len(p) for p in parts)))
    for p in parts:
        stream.write(p)
    stream.flush()


def receive(stream) -> bytes | None:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (n,) = _LENGTH.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("the worker's pipe closed mid-message")
    return data


CHUNK, FILE, HALF = b"C", b"F", b"H"


class Worker:
    """One worker process; `submit` a chunk (or `submit_file` a whole trace), then `result` it before
    submitting the next."""

    started = False  # whether this process started one (a command that did is not replayed: cli/replay.py)

    def __init__(self) -> None:
        Worker.started = True
        root = str(Path(__file__).resolve().parents[2])
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
            HEADROOM_LOAD_WORKERS="0",
            POLARS_MAX_THREADS="1",
        )  # one core each: the loader has the other
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from headroom.trace.worker_main import main; main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self.busy = False
        self.closed = False

    def submit(self, data: bytes) -> None:
        send(self.process.stdin, CHUNK, data)
        self.busy = True

    def submit_file(self, path: Path, lenient: bool) -> None:
        """Decode a whole trace file (load.decode): a load.Decoded (its checked polars tables, base, metadata, warnings)."""
        send(self.process.stdin, FILE, pickle.dumps((str(path), lenient)))
        self.busy = True

    def submit_half(self, path: Path, start: int, prefix: bytes, folder: Path | None = None) -> None:
        """Decode a plain file's events from byte `start` to the end (chunks.decode_second_half), its parts'
        tables written to Arrow files in `folder` (chunks.spill) when one is given."""
        send(self.process.stdin, HALF, pickle.dumps((str(path), start, prefix, str(folder) if folder else None)))
        self.busy = True

    def result(self, last: bool = True):
        """The next answer; `last=False`: more answers to this request follow (a half's parts)."""
        payload = receive(self.process.stdout)
        self.busy = not last
        if payload is None:
            raise EOFError("the loader's worker process ended")
        return pickle.loads(payload)

    def answered(self) -> None:
        """The answer just read (with `result(last=False)`) was the whole of it: nothing more follows."""
        self.busy = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.busy:  # its answer is not wanted (the loader stopped on an error): do not wait for it
            self.process.kill()
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self.process.kill()
            self.process.wait()
