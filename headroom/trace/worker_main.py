"""The loader's worker process (headroom/trace/worker.py starts it): decode what the parent sends until its
pipe closes. It imports pandas only when sent a whole file, so it is ready by the time the loader has read
its first blocks."""

from __future__ import annotations

import gc
import os
import pickle
import sys
from pathlib import Path
from typing import Any

from headroom.errors import UserError
from headroom.trace import chunks, scan, worker


def main() -> None:
    """The worker process: decode what the parent sends until its pipe closes."""
    gc.disable()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        data = worker.receive(stdin)
        if data is None:
            # Nothing is left to flush or free: end now rather than spend the loader's time tearing down.
            os._exit(0)
        view = memoryview(data)
        kind = bytes(view[:1])
        result: Any
        try:
            if kind == worker.CHUNK:
                result = scan.decode_events(view[1:])
            elif kind == worker.HALF:
                path, start, prefix, folder = pickle.loads(view[1:])
                numbers = iter(range(1 << 30))
                result = chunks.decode_second_half(
                    Path(path),
                    start,
                    prefix,
                    (lambda part: chunks.spill(part, Path(folder), next(numbers))) if folder else (lambda part: part),
                )
                if not isinstance(result, str):
                    _send_parts(stdout, *result)
                    continue
            else:
                from headroom.trace import load  # (pandas: imported only for whole files)

                path, lenient = pickle.loads(view[1:])
                result = load.decode(Path(path), lenient, workers=False)
        except UserError as e:  # sent back, raised by the parent as its own
            result = e
        del view, data
        worker.send(stdout, pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))


def _send_parts(stdout, parts: list, doc) -> None:
    """A half's parts one message each (how many first, the Document last), each freed once sent."""
    worker.send(stdout, pickle.dumps(len(parts)))
    parts.reverse()
    while parts:
        worker.send(stdout, pickle.dumps(parts.pop(), protocol=pickle.HIGHEST_PROTOCOL))
    worker.send(stdout, pickle.dumps(doc, protocol=pickle.HIGHEST_PROTOCOL))
