"""What a benchmark script records with its numbers: the machine and the date, and where it writes them
(printed, and with --out a JSON file through headroom's one JSON writer)."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from headroom.jsonio import dumps, write_json


def stamp() -> dict[str, str]:
    return {"machine": f"{platform.node()} {platform.processor() or platform.machine()} {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%d %H:%M %Z")}


def emit(result: dict[str, Any], out: str | None) -> None:
    print(dumps(result, indent=1))
    if out:
        write_json(out, result, indent=1)
