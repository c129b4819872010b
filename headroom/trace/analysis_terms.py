"""The words an analysis is told in: its mode and basis, and what its run is called (the model and variant its
manifest records; `report` adds the batch to the runs of one model at several). Plain functions of the manifest
and the source's name, importing neither numpy nor pandas: a command printing a cached summary
(headroom/report/summary.py) uses them without an Analysis.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MODE_GPU = "gpu"
MODE_CPU = "cpu-ops"
STEPS_BASIS = "ProfilerStep ranges"  # the only basis a manifest's unprofiled step time is measured on


def manifest_of(metadata: dict[str, Any]) -> dict[str, Any]:
    """The trace's `"headroom"` run manifest: an object, else none (a trace may carry anything there)."""
    m = metadata.get("headroom") if isinstance(metadata, dict) else None
    return m if isinstance(m, dict) else {}


_SIZE = re.compile(r"(?<=[-_])\d+(\.\d+)?[kmbt]$", re.IGNORECASE)
_LAYERS_TOKEN = re.compile(r"\d+of\d+-layers")


def run_name(m: dict[str, Any]) -> str:
    """The model a run profiled: the workload name with a flavour's size in place of the default's
    (`llama-7b --flavour 13b` -> `llama-13b`); an `hf:` model by the last part of its hub id or directory, as its
    trace file is named (`hf:tests/data/hf/llama-3-8b` -> `hf:llama-3-8b`)."""
    name = str(m.get("workload") or "")
    if name.startswith("hf:") and name.rstrip("/").count("/"):
        name = "hf:" + name.rstrip("/").rsplit("/", 1)[1]
    flavour = str(m.get("flavour") or "")
    if not flavour or flavour == "default":
        return name
    if _SIZE.search(name) and re.fullmatch(r"\d+(\.\d+)?[kmbt]", flavour, re.IGNORECASE):
        return _SIZE.sub(flavour, name)
    return f"{name} ({flavour})"


def run_model(m: dict[str, Any]) -> str:
    """The model a run's manifest names (`run_name`), "" for a trace without one (`report` labels the runs of
    one model at several batch sizes with their batch: `label_batches`)."""
    return run_name(m) if m.get("workload") else ""


def partial_layers(m: dict[str, Any]) -> tuple[int, int] | None:
    """(built, total) blocks of a `headroom profile --layers` run that built only some of them."""
    built, total = m.get("layers"), m.get("total_layers")
    if isinstance(built, int) and isinstance(total, int) and 0 < built < total:
        return built, total
    return None


def run_label(m: dict[str, Any], source: str, extrapolated: bool = False) -> str:
    """What tables and figures call a trace: the model and variant its manifest `m` records
    (`llama-13b infer prefill (4 of 40 layers, extrapolated)`), else the file name of `source`."""
    if m.get("workload"):
        variant = " ".join(t for t in str(m.get("variant") or "").split() if not _LAYERS_TOKEN.fullmatch(t))
        label = f"{run_name(m)}{' ' + variant if variant else ''}"
        part = partial_layers(m)
        if part:
            label += f" ({part[0]} of {part[1]} layers{', extrapolated' if extrapolated else ''})"
        return label
    name = Path(source).name
    for suffix in (".json.gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name


def steps_phrase(basis: str, num_steps: int) -> str:
    """The analysed time in words: `3 step(s)`, `the whole trace`, or the --window's description."""
    if basis == STEPS_BASIS:
        return f"{num_steps} step(s)"
    if basis == "whole trace":
        return "the whole trace"
    return basis


def label_batches(rows: list[dict[str, Any]], models: list[str]) -> list[dict[str, Any]]:
    """The rows (new dicts), runs of one model (`models`, "" for none) at several batch sizes (decode at batch 1
    and 32) saying their batch in the workload's label."""
    batches: dict[str, set[str]] = {}
    for row, model in zip(rows, models):
        batches.setdefault(model, set()).add(str(row["batch"]))
    out = []
    for row, model in zip(rows, models):
        row = dict(row)
        if model and len(batches[model]) > 1 and row["batch"] != "":
            row["workload"] = f"{row['workload']} bs{row['batch']}"
        out.append(row)
    return out
