"""What one extraction returns (`ExtractResult`), and the names and header fields every extraction
writes, whether of a module (headroom.extract.run) or of an operator (headroom.extract.ops)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headroom.extract.problem import Share
from headroom.jsonio import plain
from headroom.profile.workload import RunConfig


@dataclass
class ExtractResult:
    name: str
    problem: Path
    entry: Path
    trace: Path | None
    selectors: list[str]
    share: Share | None
    calls_per_step: int
    instances: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # caveats of the analysed trace (a step-less --trace)


def safe_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)


def header_config(cfg: RunConfig) -> dict[str, Any]:
    keep = ("flavour", "mode", "phase", "kv_cache", "batch", "seq", "dtype", "device", "layers")
    d = plain(cfg)
    return {k: d[k] for k in keep if d.get(k) is not None}
