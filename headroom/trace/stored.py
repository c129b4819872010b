"""Finished analyses, cached beside the trace's tables (cache.py), so the second command on a trace reads
its analysis instead of computing it (docs/trace-core.md, "Cache").

An analysis depends on the trace (its entry), the code and data below, every field of every rule, the
policy and the time analysed: all in its name, so another of them is another entry, never a stale one.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headroom.trace.cache_key import code_version

if TYPE_CHECKING:
    from headroom.trace.tables import Trace

_HERE = Path(__file__).parent
_CODE = (
    "attribute.py",
    "compiled.py",
    "context.py",
    "modules.py",
    "phases.py",
    "intervals.py",
    "ranges.py",
    "analysis.py",
    "analysis_result.py",
    "classify.py",
    "accounting.py",
    "stored.py",
)
_VERSION = code_version(
    *(_HERE / n for n in _CODE), *(_HERE.parent / "data" / n for n in ("phases.toml", "compiled.toml"))
)

# An Analysis' fields that are stored: its frames (tables keyed by KEYS are stored without their index)
# and the rest in a JSON header.
FRAMES = ("events", "categories", "kernels", "ops", "steps", "modules", "step_ranges")
KEYS = {"categories": "name", "kernels": "name", "ops": "op", "steps": "step"}
HEADER = (
    "mode",
    "window",
    "num_steps",
    "n_devices",
    "total_us",
    "busy_us",
    "wall_us",
    "idle_us",
    "addressable_us",
    "basis",
    "notes",
    "warnings",
)
FIELDS = FRAMES + HEADER


def name_of(rules: list, policy: Any, whole_trace: bool, window: str | None) -> str:
    """The entry's name for an analysis with these rules (classify.Rule), policy and time analysed."""
    h = hashlib.sha256(_VERSION.encode())
    for rule in rules:  # every field; a regex by its text
        h.update(
            repr([getattr(v, "pattern", v) for v in (getattr(rule, f.name) for f in dataclasses.fields(rule))]).encode()
        )
    h.update(repr(sorted(policy.addressable.items())).encode())
    h.update(repr((whole_trace, window)).encode())
    return f"analysis-{h.hexdigest()[:20]}"


def fetch(trace: Trace, name: str) -> dict[str, Any] | None:
    """The stored fields (FIELDS; the KEYS tables without their index), or None."""
    from headroom.trace import cache  # (numpy and pandas: naming an entry needs neither)

    hit = cache.fetch_frames(trace.cache_key, name)
    if hit is None:
        return None
    frames, header = hit
    if set(frames) != set(FRAMES) or set(header) != set(HEADER):
        return None
    return {**frames, **header, "window": tuple(header["window"])}


def store(trace: Trace, name: str, fields: dict[str, Any]) -> bool:
    from headroom.trace import cache

    frames = {f: fields[f] for f in FRAMES}
    for f in KEYS:
        frames[f] = frames[f].reset_index(drop=True)
    header = {h: fields[h] for h in HEADER}
    header["window"] = list(header["window"])
    return cache.store_frames(trace.cache_key, name, frames, header)
