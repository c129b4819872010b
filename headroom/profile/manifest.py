"""The run manifest: put into the trace under a top-level "headroom" key, and `manifest.json`
beside the traces (one entry per trace file)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from headroom.errors import UserError
from headroom.jsonio import atomic_file, dumps, write_json

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = 1


def _inject_and_compress(raw_json: Path, manifest: dict[str, Any], dest: Path) -> None:
    """Put the manifest under a top-level "headroom" key, gzip, and write `dest` atomically."""
    data = raw_json.read_bytes()
    brace = data.find(b"{")
    if brace < 0:
        raise RuntimeError(f"{raw_json}: the profiler wrote no JSON object")
    head = b'"headroom": ' + dumps(manifest).encode() + b",\n"
    with atomic_file(dest) as f:
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=6, mtime=0) as gz:
            gz.write(data[: brace + 1])
            gz.write(head)
            gz.write(data[brace + 1 :])


def update_manifest(out_dir: Path, trace_name: str, entry: dict[str, Any], timeout_s: float = 60.0) -> Path:
    """`manifest.json` beside the traces: one entry per trace file, merged with what is there.

    Runs that write into one directory at once take turns: the read-merge-write holds a lock
    (`manifest.json.lock`, filelock), so no run's entry is lost to another's write.
    """
    path = out_dir / MANIFEST_NAME
    lock = FileLock(str(path) + ".lock")
    try:
        with lock.acquire(timeout=timeout_s):
            doc: dict[str, Any] = {"schema": MANIFEST_SCHEMA, "traces": {}}
            if path.exists():
                try:
                    old = json.loads(path.read_text())
                    if isinstance(old, dict) and isinstance(old.get("traces"), dict):
                        doc["traces"] = old["traces"]
                except (OSError, ValueError):
                    pass
            doc["traces"][trace_name] = entry
            doc["traces"] = dict(sorted(doc["traces"].items()))
            write_json(path, doc)
    except Timeout:
        raise UserError(f"{path}: another run held its lock for {timeout_s:g} s ({lock.lock_file})") from None
    except OSError as e:  # the lock file cannot be made (a read-only directory)
        raise UserError(f"{path}: cannot write ({e.strerror or e})") from None
    return path
