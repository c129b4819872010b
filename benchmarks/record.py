"""What a benchmark script records with its numbers: the machine and the date, and where it writes them
(printed, and with --out a JSON file through headroom's one JSON writer)."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from headroom.jsonio import dumps, write_json


def stamp() -> dict[str, str]:
    return {
        "machine": f"{platform.node()} {platform.processor() or platform.machine()} {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def warm(path) -> None:
    """Read a file once, untimed, so that every timed run finds it in the page cache: these machines' kernels
    reclaim cold page cache (a 2 GB trace read from disk took 40.9 s once), and a round's first reader or
    command would otherwise pay for reading it from disk."""
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


def emit(result: dict[str, Any], out: str | None) -> None:
    print(dumps(result, indent=1))
    if out:
        write_json(out, result, indent=1)
